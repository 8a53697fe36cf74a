// proxy_overhead_bench: what moengine's proxy adds to a request, against nginx as a plain
// reverse proxy, in one run and in front of the same stub backend (docs/benchmarks.md,
// "Proxy overhead against nginx"). Five targets: the stub itself, nginx, moengine's proxy
// with the stub as unified instances (one hop, like nginx), with the stub as a prefill
// and a decode instance (two legs per request, the cost of disaggregated routing), and
// unified again while a client polls its dashboard state every 0.2 s. They
// take turns, request by request for latency and level by level for rates, so that the
// drift of a shared machine touches them alike. Then the dashboard's cost within one
// proxy: its state polled in every other block of requests (DashboardAb).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "closed_loop.h"
#include "core/error.h"
#include "interrupt.h"
#include "nginx_process.h"
#include "proxy_front.h"
#include "report.h"
#include "results.h"
#include "stub_backend.h"

namespace moe::bench {
namespace {

struct Options {
  std::string nginx = "/usr/sbin/nginx";
  size_t requests = 2000;
  size_t warmup_requests = 50;
  double duration_s = 1.0;
  double warmup_s = 0.2;
  std::vector<int> concurrency{1, 2, 4, 8, 16, 32, 64};
  double p99_bound_ms = 25;
  int output_tokens = 16;
  int prompt_bytes = 400;
  int threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  size_t ab_blocks = 10;
  size_t ab_block_requests = 4000;
  int ab_poll_ms = 2000;
  std::string json;
};

// Ctrl-C or SIGTERM: the run stops between steps and unwinds.
class Interrupted : public Error {
 public:
  Interrupted() : Error("interrupted") {}
};

enum Target : size_t { kDirect, kNginx, kUnified, kPd, kUnifiedDashboard, kTargets };
constexpr std::array<const char*, kTargets> kTargetNames{"direct (stub)", "nginx", "moengine unified", "moengine P/D",
                                                                "unified+dashboard"};
constexpr std::array<const char*, kTargets> kShortNames{"direct", "nginx", "unified", "P/D", "unified+dash"};

std::string nginx_version(const std::string& binary) {
  std::string out;
  if (FILE* p = popen((binary + " -v 2>&1").c_str(), "r")) {
    std::array<char, 256> buf;
    while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
    pclose(p);
  }
  const size_t at = out.find("nginx/");
  return at == std::string::npos ? "nginx" : out.substr(at, out.find_first_of(" \r\n", at) - at);
}

std::string request_body(const Options& o, Kind kind) {
  nlohmann::json body{{"model", "stub"},
                      {"prompt", std::string(size_t(o.prompt_bytes), 'x')},
                      {"max_tokens", o.output_tokens},
                      {"temperature", 0}};
  if (kind == Kind::kStreamed) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
  }
  return body.dump();
}

class Bench {
 public:
  Bench(const Options& o, const std::atomic<bool>& interrupted)
      : o_(o),
        interrupted_(interrupted),
        stub_(StubConfig{o.output_tokens, o.threads}),
        nginx_(NginxConfig{o.nginx, "127.0.0.1:" + std::to_string(stub_.port()), o.threads}) {
    results_.peer = nginx_version(o.nginx);
    results_.threads = o.threads;
    results_.output_tokens = o.output_tokens;
    results_.requests = o.requests;
    results_.duration_s = o.duration_s;
    results_.p99_bound_ms = o.p99_bound_ms;
    for (const char* name : kTargetNames) results_.targets.push_back(TargetResult{name, {}, {}, ""});
    steps_ = 2 * (2 + o.concurrency.size());
    results_.dashboard.blocks = o.ab_blocks;
    results_.dashboard.block_requests = o.ab_block_requests;
    results_.dashboard.poll_ms = o.ab_poll_ms;
  }

  const Results& run() {
    const double latency_s = 0.6e-3 * double(2 * kTargets * (o_.requests + o_.warmup_requests)) +
                             0.45e-3 * double(2 * 2 * 2 * o_.ab_blocks * o_.ab_block_requests);
    const double ramp_s = double(2 * kTargets * o_.concurrency.size()) * (o_.duration_s + o_.warmup_s);
    fmt::print(stderr, "proxy_overhead_bench: about {:.0f} s; stub at {}, nginx at {}\n", latency_s + ramp_s, stub_.url(),
               nginx_.url());
    for (Kind kind : kKinds) latency(kind);
    for (Kind kind : kKinds) dashboard_ab(kind);
    for (Kind kind : kKinds) {
      for (int c : o_.concurrency) {
        std::string line;
        for (size_t t = 0; t < kTargets; ++t) {
          LoadSpec spec = spec_for(kind);
          spec.concurrency = c;
          spec.warmup_s = o_.warmup_s;
          spec.duration_s = o_.duration_s;
          // The moengine fronts are built for each run, so that no proxy's health probes
          // run during another target's; the unified one with as many copies of the stub as
          // requests will be in flight (see unified_instances).
          const std::unique_ptr<ProxyFront> front = front_for(Target(t), c);
          spec.url = url_of(Target(t), front.get());
          const LoadResult load = run_closed_loop(spec);
          keep_first_error(Target(t), load);
          const Step s = make_step(load, c, o_.p99_bound_ms);
          results_.targets[t].ramp[size_t(kind)].push_back(s);
          line += fmt::format("  {} {:.0f}/s p99 {:.2f}", kShortNames[t], s.rate, s.latency.p99_ms);
        }
        progress(fmt::format("rate     {:<8} c={:<3}{}", kind_name(kind), c, line));
      }
    }
    return results_;
  }

 private:
  // At one connection, the targets taking turns request by request (run_in_turns).
  void latency(Kind kind) {
    std::array<std::unique_ptr<ProxyFront>, kTargets> fronts;
    std::vector<LoadSpec> specs;
    for (size_t t = 0; t < kTargets; ++t) {
      fronts[t] = front_for(Target(t), 1);
      LoadSpec spec = spec_for(kind);
      spec.url = url_of(Target(t), fronts[t].get());
      spec.requests = o_.requests;
      spec.warmup_requests = o_.warmup_requests;
      specs.push_back(std::move(spec));
    }
    const std::vector<LoadResult> loads = run_in_turns(specs);
    std::string line;
    for (size_t t = 0; t < kTargets; ++t) {
      keep_first_error(Target(t), loads[t]);
      const Step s = make_step(loads[t], 1, o_.p99_bound_ms);
      results_.targets[t].latency[size_t(kind)] = s;
      line += fmt::format("  {} {:.3f}/{:.3f}", kShortNames[t], s.latency.p50_ms, s.latency.p99_ms);
    }
    progress(fmt::format("latency  {:<8} p50/p99 ms:{}", kind_name(kind), line));
  }

  // One unified proxy, polled in odd blocks and quiet in even ones, each block's requests
  // taking turns with the direct stub's; the latencies pooled by polled or quiet.
  void dashboard_ab(Kind kind) {
    ProxyFront front(unified_instances(stub_.url(), 1), o_.threads, std::chrono::milliseconds(o_.ab_poll_ms));
    std::array<LoadResult, 4> direct, proxied;  // [polled], then the quiet blocks' halves at 2 and 3
    for (size_t b = 0; b < 2 * o_.ab_blocks; ++b) {
      const bool polled = b % 2 == 1;
      front.set_polling(polled);
      std::vector<LoadSpec> specs(2, spec_for(kind));
      specs[1].url = front.url();
      specs[0].url = stub_.url();
      for (LoadSpec& s : specs) {
        s.requests = o_.ab_block_requests;
        s.warmup_requests = 10;
      }
      const size_t polls_before = front.polls();
      const std::vector<LoadResult> loads = run_in_turns(specs);
      if (polled) results_.dashboard.polls[size_t(kind)] += front.polls() - polls_before;
      keep_first_error(kDirect, loads[0]);
      keep_first_error(kUnifiedDashboard, loads[1]);
      const auto pool_into = [&](size_t pool) {
        for (size_t t = 0; t < 2; ++t) {
          std::vector<double>& into = (t == 0 ? direct : proxied)[pool].latencies_ms;
          into.insert(into.end(), loads[t].latencies_ms.begin(), loads[t].latencies_ms.end());
        }
      };
      // Quiet blocks are b = 0, 2, 4, ...: the halves are b % 4 == 0 and b % 4 == 2.
      pool_into(polled ? 1 : 0);
      if (!polled) pool_into(b % 4 == 0 ? 2 : 3);
    }
    const auto added = [&](size_t pool) {
      const Percentiles d = make_step(direct[pool], 1, o_.p99_bound_ms).latency;
      const Percentiles p = make_step(proxied[pool], 1, o_.p99_bound_ms).latency;
      return Percentiles{p.p50_ms - d.p50_ms, p.p99_ms - d.p99_ms};
    };
    results_.dashboard.quiet[size_t(kind)] = added(0);
    results_.dashboard.polled[size_t(kind)] = added(1);
    results_.dashboard.quiet_a[size_t(kind)] = added(2);
    results_.dashboard.quiet_b[size_t(kind)] = added(3);
    const Percentiles &a = results_.dashboard.polled[size_t(kind)], &q = results_.dashboard.quiet[size_t(kind)];
    progress(fmt::format("dash A/B {:<8} added p50/p99 ms: polled {:.3f}/{:.3f} quiet {:.3f}/{:.3f} ({} polls)", kind_name(kind),
                         a.p50_ms, a.p99_ms, q.p50_ms, q.p99_ms, results_.dashboard.polls[size_t(kind)]));
  }

  std::unique_ptr<ProxyFront> front_for(Target target, int concurrency) const {
    if (target == kUnified) return std::make_unique<ProxyFront>(unified_instances(stub_.url(), concurrency), o_.threads);
    if (target == kPd) return std::make_unique<ProxyFront>(pd_instances(stub_.url()), o_.threads);
    // As unified, polled ten times as often as the dashboard page polls (every 2 s).
    if (target == kUnifiedDashboard) {
      return std::make_unique<ProxyFront>(unified_instances(stub_.url(), concurrency), o_.threads, std::chrono::milliseconds(200));
    }
    return nullptr;
  }

  std::string url_of(Target target, const ProxyFront* front) const {
    return front ? front->url() : target == kNginx ? nginx_.url() : stub_.url();
  }

  void keep_first_error(Target target, const LoadResult& load) {
    std::string& first = results_.targets[target].first_error;
    if (first.empty()) first = load.first_error;
  }

  LoadSpec spec_for(Kind kind) const {
    LoadSpec spec;
    spec.body = request_body(o_, kind);
    spec.stream = kind == Kind::kStreamed;
    spec.expected_text = stub_.expected_text();
    spec.stop = &interrupted_;
    spec.backend_requests = [this] { return stub_.counts().total(); };
    return spec;
  }

  void progress(const std::string& line) {
    if (interrupted_) throw Interrupted();
    fmt::print(stderr, "[{:>2}/{}] {}\n", ++done_, steps_, line);
  }

  const Options& o_;
  const std::atomic<bool>& interrupted_;
  StubBackend stub_;
  NginxProcess nginx_;
  Results results_;
  size_t steps_ = 0, done_ = 0;
};

int run(const Options& o, const std::atomic<bool>& interrupted) {
  Bench bench(o, interrupted);
  const Results& r = bench.run();
  print_report(r, stdout);
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << to_json(r).dump(2) << '\n';
    if (!out) fail("cannot write {}", o.json);
  }
  if (const size_t errors = total_errors(r)) {
    fmt::print(stderr, "proxy_overhead_bench: {} requests failed (see 'errors via' above)\n", errors);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace moe::bench

int main(int argc, char** argv) {
  const moe::bench::InterruptFlag interrupt;
  moe::bench::Options o;
  CLI::App app{"Proxy overhead: moengine's proxy against nginx as a plain reverse proxy, in front of the same stub "
               "backend, in one run (docs/benchmarks.md)"};
  app.add_option("--nginx", o.nginx, "The nginx binary")->capture_default_str();
  app.add_option("--requests", o.requests, "Counted requests per target and answer kind at 1 connection (the targets take turns)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup-requests", o.warmup_requests, "Uncounted requests before those")->capture_default_str();
  app.add_option("--duration-s", o.duration_s, "Seconds counted per target, answer kind and concurrency")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup-s", o.warmup_s, "Uncounted seconds before those")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--concurrency", o.concurrency, "Concurrency levels of the rate ramp")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--p99-bound-ms", o.p99_bound_ms, "A rate is held while p99 latency stays within this")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--output-tokens", o.output_tokens, "Tokens per answer (streamed: an event each)")
      ->capture_default_str()
      ->check(CLI::Range(2, 4096));
  app.add_option("--prompt-bytes", o.prompt_bytes, "Prompt length in bytes (the proxy counts ~4 bytes a token)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", o.threads, "I/O threads of moengine's proxy and of the stub; nginx's worker processes")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--ab-blocks", o.ab_blocks, "Polled blocks, and as many quiet ones, of the dashboard A/B pass")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--ab-block-requests", o.ab_block_requests, "Requests per block of the dashboard A/B pass")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--ab-poll-ms", o.ab_poll_ms, "How often the A/B pass polls the dashboard state (the page polls every 2000)")
      ->capture_default_str()
      ->check(CLI::Range(10, 60000));
  app.add_option("--json", o.json, "Also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    return moe::bench::run(o, interrupt.raised());
  } catch (const moe::bench::Interrupted& e) {
    std::fprintf(stderr, "proxy_overhead_bench: interrupted\n");
    return 130;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "proxy_overhead_bench: %s\n", e.what());
    return 1;
  }
}
