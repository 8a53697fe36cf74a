#pragma once
// The requests a simulation serves: arrival times and token counts drawn from the
// configured distributions, or read from a recorded trace.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sim/sim_config.h"

namespace moe::sim {

struct RequestSpec {
  double arrival_s = 0;
  int64_t prompt_tokens = 0;  // the whole prompt, cached part included
  int64_t cached_tokens = 0;  // found in the cache every instance reads (prefix_hit_rate)
  int64_t output_tokens = 0;
  int32_t prefix_group = -1;  // shared_prefix: the group whose prefix the prompt starts with
};

// A recorded request: its arrival offset and, where the trace has them, its lengths (0:
// not recorded, drawn from the configured distribution instead).
struct TracedRequest {
  double arrival_s = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
};

// Reads a bench serve result file (--save-detailed: start_times, input_lens, output_lens)
// or a proxy access log (JSON lines: received_s or received, prompt_tokens and
// output_tokens where present). Arrivals are made relative to the first.
std::vector<TracedRequest> read_request_trace(const std::string& path);

class WorkloadGenerator {
 public:
  WorkloadGenerator(const Workload& workload, std::vector<TracedRequest> trace);

  // The next open-loop request (poisson, gamma, trace), or false when arrivals are over.
  bool next_arrival(RequestSpec& spec);
  // A request for a closed-loop client sending at `now` (its lengths drawn, or the next of
  // lengths_from's requests), or false when the configured number of requests, the
  // duration or lengths_from's requests are used up.
  bool next_closed(double now, RequestSpec& spec);
  bool closed_loop() const { return w_.arrival.kind == Arrival::Kind::closed; }
  int64_t issued() const { return issued_; }

 private:
  int64_t draw(const Lengths& l, int64_t traced);
  void fill(RequestSpec& spec, const TracedRequest* traced);
  bool more(double at) const;

  Workload w_;
  std::vector<TracedRequest> trace_;
  std::mt19937_64 rng_;
  double clock_ = 0;
  int64_t issued_ = 0;
};

}  // namespace moe::sim
