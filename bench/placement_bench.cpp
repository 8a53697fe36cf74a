// Expert placement: out-of-sample balance of moengine's planner against DeepSeek's EPLB on
// DeepSeek-V3-shaped synthetic traces (58 MoE layers, 256 experts, top-8), and planning
// speed. Each trace is cut into windows; every algorithm plans on window k and is scored
// on window k + 1, with the same total number of slots.
//   placement_bench            the full tables (about a minute)
//   placement_bench --quick    fewer windows, shorter traces
//   placement_bench --seed N   other trace realizations (N is added to every trace's seed),
//                              to tell a real gain from one realization's luck
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "placement/eplb.h"
#include "placement/incremental.h"
#include "placement/metrics.h"
#include "placement/moengine_planner.h"
#include "placement/trace_gen.h"

using namespace moe::placement;

namespace {

struct Setup {
  const char* name;
  Topology topo;
  int64_t tokens;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename F>
double best_time(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

void quality(bool quick, uint64_t seed_offset) {
  const Setup setups[] = {{"EP32 prefill, 4x8, 9 slots/dev (R=32/layer)", {4, 8, 9}, 8192},
                          {"EP144 decode, 18x8, 2 slots/dev (R=32/layer)", {18, 8, 2}, 4096}};
  const double skews[] = {0.2, 0.5, 0.8, 1.1};
  const int64_t window = 32, windows = quick ? 3 : 5;
  std::printf("## Out-of-sample balance (plan on window k, score on k+1; %lld-step windows, mean of %lld pairs)\n\n",
              static_cast<long long>(window), static_cast<long long>(windows - 1));
  std::printf("| setup | skew | eplb balance | moengine balance | gain (points) | eplb remote | moengine remote | moengine slots/layer |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Setup& s : setups) {
    for (double skew : skews) {
      TraceGenOptions g;
      g.steps = window * windows;
      g.tokens = s.tokens;
      g.skew = skew;
      g.skew_spread = 0.6;
      g.drift = 0.0005;
      g.burst = 0.05;
      g.correlation = 0.5;
      g.seed = uint64_t(skew * 1000) + 7 + seed_offset;
      const Trace trace = generate_trace(g);
      double base = 0, ours = 0, base_remote = 0, ours_remote = 0;
      int32_t lo = 1 << 30, hi = 0;
      for (int64_t k = 0; k + 1 < windows; ++k) {
        const Window plan{k * window, (k + 1) * window}, next{(k + 1) * window, (k + 2) * window};
        const Placement pe = plan_eplb(window_load(trace, plan), s.topo, 8);
        const Placement pm = plan_moengine(trace, plan, s.topo);
        const Metrics me = evaluate(trace, next, pe), mm = evaluate(trace, next, pm);
        base += me.balance, ours += mm.balance;
        base_remote += me.remote_share, ours_remote += mm.remote_share;
        for (int32_t n : mm.layer_slots) lo = std::min(lo, n), hi = std::max(hi, n);
      }
      const double n = double(windows - 1);
      std::printf("| %s | %.1f | %.4f | %.4f | %+.2f | %.3f | %.3f | %d..%d |\n", s.name, skew, base / n, ours / n,
                  100 * (ours - base) / n, base_remote / n, ours_remote / n, lo, hi);
      std::fflush(stdout);
    }
  }
}

void speed() {
  std::printf("\n## Planning speed (61 layers x 256 experts, best of 5)\n\n");
  std::printf("| topology | slots/layer | eplb | moengine (full plan) | incremental (<=64 moves) | moves | balance before -> after |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  const Setup setups[] = {{"32 devices (4x8) x 9", {4, 8, 9}, 8192}, {"144 devices (18x8) x 2", {18, 8, 2}, 4096}};
  for (const Setup& s : setups) {
    TraceGenOptions g;
    g.steps = 64;
    g.layers = 61;
    g.tokens = 2048;
    g.skew = 0.8;
    g.drift = 0.01;
    g.seed = 3;
    const Trace trace = generate_trace(g);
    const LoadMatrix first = window_load(trace, {0, 32}), second = window_load(trace, {32, 64});
    Placement p;
    const double t_eplb = best_time(5, [&] { p = plan_eplb(first, s.topo, 8); });
    const double t_ours = best_time(5, [&] { p = plan_moengine(first, s.topo); });
    IncrementalResult r;
    IncrementalOptions io;
    io.max_moves = 64;
    const double t_inc = best_time(5, [&] { r = plan_incremental(second, p, io); });
    std::printf("| %s | %d | %.1f ms | %.1f ms | %.2f ms | %lld | %.4f -> %.4f |\n", s.name, s.topo.devices() * s.topo.slots_per_device,
                1e3 * t_eplb, 1e3 * t_ours, 1e3 * t_inc, static_cast<long long>(r.moves), r.balance_before, r.balance_after);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  uint64_t seed_offset = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed_offset = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: placement_bench [--quick] [--seed N]\n");
      return 2;
    }
  }
  quality(quick, seed_offset);
  speed();
  return 0;
}
