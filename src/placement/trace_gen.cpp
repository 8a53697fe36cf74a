#include "placement/trace_gen.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace moe::placement {
namespace {

// Walker's alias method: one 64-bit draw picks an expert in O(1).
class Alias {
 public:
  void build(const std::vector<double>& p) {
    const size_t n = p.size();
    prob_.assign(n, 0.0);
    alias_.assign(n, 0);
    const double sum = std::accumulate(p.begin(), p.end(), 0.0);
    std::vector<double> scaled(n);
    std::vector<uint32_t> small, large;
    for (size_t i = 0; i < n; ++i) {
      scaled[i] = p[i] * double(n) / sum;
      (scaled[i] < 1.0 ? small : large).push_back(uint32_t(i));
    }
    while (!small.empty() && !large.empty()) {
      const uint32_t s = small.back(), l = large.back();
      small.pop_back();
      prob_[s] = scaled[s];
      alias_[s] = l;
      scaled[l] -= 1.0 - scaled[s];
      if (scaled[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
    for (uint32_t i : small) prob_[i] = 1.0;
    for (uint32_t i : large) prob_[i] = 1.0;
  }
  int32_t draw(std::mt19937_64& rng) const {
    const uint64_t r = rng();
    const size_t i = size_t((r >> 32) * prob_.size() >> 32);
    const double coin = double(uint32_t(r)) * 0x1p-32;
    return int32_t(coin < prob_[i] ? i : alias_[i]);
  }

 private:
  std::vector<double> prob_;
  std::vector<uint32_t> alias_;
};

void check(const TraceGenOptions& o) {
  if (o.steps <= 0 || o.layers <= 0 || o.experts <= 0) fail("gen-trace: steps, layers and experts must be > 0");
  int64_t loads = 0;
  if (__builtin_mul_overflow(o.steps, o.layers, &loads) || __builtin_mul_overflow(loads, o.experts, &loads) ||
      loads > kMaxTraceLoads) {
    fail("gen-trace: {} steps x {} layers x {} experts is more than {} loads", o.steps, o.layers, o.experts, kMaxTraceLoads);
  }
  if (o.top_k <= 0 || o.top_k > o.experts) fail("gen-trace: top-k {} must be in 1..{} (the experts)", o.top_k, o.experts);
  if (o.tokens < 0) fail("gen-trace: tokens per step must be >= 0, got {}", o.tokens);
  if (!(o.skew >= 0 && o.skew <= 8)) fail("gen-trace: skew {} must be in [0, 8]", o.skew);
  if (!(o.skew_spread >= 0 && o.skew_spread <= 1)) fail("gen-trace: skew spread {} must be in [0, 1]", o.skew_spread);
  if (!(o.drift >= 0 && o.drift <= 1)) fail("gen-trace: drift {} must be in [0, 1]", o.drift);
  if (!(o.burst >= 0 && o.burst <= 1)) fail("gen-trace: burst {} must be in [0, 1]", o.burst);
  if (!(o.burst_gain >= 1 && o.burst_gain <= 1e6)) fail("gen-trace: burst gain {} must be in [1, 1e6]", o.burst_gain);
  if (!(o.correlation >= 0 && o.correlation <= 1)) fail("gen-trace: correlation {} must be in [0, 1]", o.correlation);
  if (o.correlation > 0) {
    if (o.groups <= 0 || o.experts % o.groups != 0) fail("gen-trace: {} experts do not split into {} equal groups", o.experts, o.groups);
    if (o.groups_per_token <= 0 || o.groups_per_token > o.groups) {
      fail("gen-trace: groups per token {} must be in 1..{}", o.groups_per_token, o.groups);
    }
    if (int64_t(o.groups_per_token) * (o.experts / o.groups) < o.top_k) {
      fail("gen-trace: {} groups of {} experts cannot supply top-k {}", o.groups_per_token, o.experts / o.groups, o.top_k);
    }
  }
}

}  // namespace

Trace generate_trace(const TraceGenOptions& o) {
  check(o);
  const int64_t E = o.experts, L = o.layers;
  const int32_t group_size = o.correlation > 0 ? int32_t(E / o.groups) : int32_t(E);
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform;

  std::vector<double> exponent(static_cast<size_t>(L));
  for (double& s : exponent) s = o.skew * (1.0 - o.skew_spread + 2.0 * o.skew_spread * uniform(rng));
  std::vector<double> latent(size_t(L * E));
  for (double& z : latent) z = normal(rng);
  const double keep = std::sqrt(1.0 - o.drift), fresh = std::sqrt(o.drift);
  const int64_t burst_size = std::max<int64_t>(1, E / 32);

  Trace trace{o.steps, L, E, std::vector<float>(size_t(o.steps * L * E), 0.0f)};
  std::vector<double> popularity(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::vector<int32_t> picked, groups_picked;
  Alias alias;
  for (int64_t t = 0; t < o.steps; ++t) {
    for (int64_t l = 0; l < L; ++l) {
      double* z = latent.data() + l * E;
      if (t > 0) {
        for (int64_t e = 0; e < E; ++e) z[e] = keep * z[e] + fresh * normal(rng);
      }
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
      for (int64_t k = 0; k < E; ++k) popularity[size_t(order[size_t(k)])] = std::pow(double(k + 1), -exponent[size_t(l)]);
      if (uniform(rng) < o.burst) {
        for (int64_t i = 0; i < burst_size; ++i) popularity[size_t(rng() % uint64_t(E))] *= o.burst_gain;
      }
      alias.build(popularity);
      float* out = trace.load.data() + (t * L + l) * E;
      for (int64_t token = 0; token < o.tokens; ++token) {
        picked.clear();
        groups_picked.clear();
        const bool grouped = o.correlation > 0 && uniform(rng) < o.correlation;
        if (grouped) {
          while (int32_t(groups_picked.size()) < o.groups_per_token) {
            const int32_t g = alias.draw(rng) / group_size;
            if (std::find(groups_picked.begin(), groups_picked.end(), g) == groups_picked.end()) groups_picked.push_back(g);
          }
        }
        auto allowed = [&](int32_t e) {
          if (std::find(picked.begin(), picked.end(), e) != picked.end()) return false;
          return !grouped || std::find(groups_picked.begin(), groups_picked.end(), e / group_size) != groups_picked.end();
        };
        // Rejection is fast unless a few experts hold nearly all the mass; then the
        // remaining picks fall back to the most popular experts still allowed.
        for (int32_t tries = 0; int32_t(picked.size()) < o.top_k && tries < 64 * o.top_k; ++tries) {
          const int32_t e = alias.draw(rng);
          if (allowed(e)) picked.push_back(e);
        }
        for (size_t k = 0; int32_t(picked.size()) < o.top_k; ++k) {
          if (allowed(order[k])) picked.push_back(order[k]);
        }
        for (int32_t e : picked) out[e] += 1.0f;
      }
    }
  }
  return trace;
}

}  // namespace moe::placement
