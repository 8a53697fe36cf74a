#pragma once
// One simulated request's life, shared by the proxy model and the instances.
#include <cstdint>
#include <string>

#include "sim/workload.h"

namespace moe::sim {

struct SimRequest {
  int64_t id = 0;
  RequestSpec spec;
  double first_token_s = -1;  // when the client has its first token
  double finish_s = -1;
  double prefill_start_s = -1;  // the first engine step that prefilled part of it
  bool rejected = false;
  std::string reject_reason;
  int32_t prefill_view = -1;  // the attention rank (routing view) of the prefill or whole request
  int32_t decode_view = -1;
  int32_t preemptions = 0;
  // Decode instances (decode_instance.h): the step the request joined the running batch at,
  // its KV length then, the output tokens it still had to produce then, and a generation
  // counter that invalidates its entry in the finishing heap when it is preempted.
  int64_t join_step = 0;
  double join_context = 0;
  double join_remaining = 0;
  double generated = 0;  // output tokens produced on D before its last preemption
  uint32_t generation = 0;
  bool recompute = false;  // preempted on D: its KV is recomputed there on re-admission

  bool done() const { return rejected || finish_s >= 0; }
  int64_t uncached_tokens() const { return spec.prompt_tokens - spec.cached_tokens; }
};

}  // namespace moe::sim
