#pragma once
// What the benchmark measured, per target and answer kind, and the figures the report
// derives from it: added latency over the direct target, and the highest rate held.
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "closed_loop.h"

namespace moe::bench {

enum class Kind { kWhole = 0, kStreamed = 1 };
inline constexpr std::array<Kind, 2> kKinds{Kind::kWhole, Kind::kStreamed};
const char* kind_name(Kind kind);

struct Percentiles {
  double p50_ms = 0, p99_ms = 0;
};

// One closed-loop run against one target.
struct Step {
  int concurrency = 1;
  size_t answers = 0;  // counted
  size_t errors = 0;
  double rate = 0;  // counted answers per second
  Percentiles latency;
  double legs_per_request = 0;  // completion requests the stub got per request sent
  bool held = false;            // no errors and p99 within the bound
};

Step make_step(const LoadResult& load, int concurrency, double p99_bound_ms);

struct TargetResult {
  std::string name;
  std::array<Step, 2> latency;            // by Kind: one connection, a number of requests in turns
  std::array<std::vector<Step>, 2> ramp;  // by Kind: rising concurrency, a time each
  std::string first_error;
};

// One proxy (unified) whose dashboard state a client polls (every poll_ms) in every other block
// of requests: the added latency over the direct stub (taken in turns with it) of the
// polled blocks' requests and of the quiet blocks' requests, per Kind. The same process
// in both, so the difference is the poll's, not two processes' placement on the machine.
struct DashboardAb {
  size_t blocks = 0;  // of each
  size_t block_requests = 0;
  int poll_ms = 0;
  std::array<Percentiles, 2> polled, quiet;
  // The quiet blocks split in two alternate halves, against each other: the noise floor.
  std::array<Percentiles, 2> quiet_a, quiet_b;
  std::array<size_t, 2> polls{};  // GETs of the state during the polled blocks
};

struct Results {
  std::string peer;  // nginx's version line
  int threads = 0, output_tokens = 0;
  size_t requests = 0;
  double duration_s = 0, p99_bound_ms = 0;
  std::vector<TargetResult> targets;  // direct, nginx, moengine unified, moengine P/D, unified polled
  DashboardAb dashboard;

  const TargetResult& direct() const { return targets.at(0); }
  const TargetResult& nginx() const { return targets.at(1); }
};

// Via a target minus direct, percentile by percentile (the runs are not paired request by
// request, so this is the difference of the distributions' percentiles).
Percentiles added_latency(const Results& r, const TargetResult& t, Kind kind);

// The held step with the highest rate; null when none held.
const Step* best_held(const std::vector<Step>& ramp);

// a / b, or 0 when b is not positive (no meaningful ratio).
double ratio(double a, double b);

size_t total_errors(const Results& r);

}  // namespace moe::bench
