#include "results.h"

#include <algorithm>

#include "loadgen/stats.h"

namespace moe::bench {

const char* kind_name(Kind kind) { return kind == Kind::kWhole ? "whole" : "streamed"; }

Step make_step(const LoadResult& load, int concurrency, double p99_bound_ms) {
  Step s;
  s.concurrency = concurrency;
  s.answers = load.latencies_ms.size();
  s.errors = load.errors;
  s.rate = load.rate();
  std::vector<double> sorted = load.latencies_ms;
  std::sort(sorted.begin(), sorted.end());
  s.latency = {loadgen::percentile(sorted, 50), loadgen::percentile(sorted, 99)};
  s.legs_per_request = load.sent ? double(load.backend_requests) / double(load.sent) : 0;
  s.held = s.errors == 0 && s.answers > 0 && s.latency.p99_ms <= p99_bound_ms;
  return s;
}

Percentiles added_latency(const Results& r, const TargetResult& t, Kind kind) {
  const Percentiles& via = t.latency[size_t(kind)].latency;
  const Percentiles& direct = r.direct().latency[size_t(kind)].latency;
  return {via.p50_ms - direct.p50_ms, via.p99_ms - direct.p99_ms};
}

const Step* best_held(const std::vector<Step>& ramp) {
  const Step* best = nullptr;
  for (const Step& s : ramp) {
    if (s.held && (!best || s.rate > best->rate)) best = &s;
  }
  return best;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

size_t total_errors(const Results& r) {
  size_t n = 0;
  for (const TargetResult& t : r.targets) {
    for (Kind k : kKinds) {
      n += t.latency[size_t(k)].errors;
      for (const Step& s : t.ramp[size_t(k)]) n += s.errors;
    }
  }
  return n;
}

}  // namespace moe::bench
