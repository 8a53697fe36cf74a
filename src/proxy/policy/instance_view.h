#pragma once
// What a routing policy sees of one instance: a snapshot the caller fills for each decision
// (the proxy from its registry, KV index and in-flight requests; the simulator from its
// model). Policies never keep a view; they read it and answer.
#include <algorithm>
#include <cstdint>
#include <string>

#include "proxy/policy/prefill_latency_model.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing {

// `both` is a unified instance: it can run a whole request, or either leg of a P/D pair.
enum class InstanceRole { prefill, decode, both };

// Zero means not reported, and then not a limit.
struct InstanceCapacity {
  int32_t max_sequences = 0;  // requests it holds at once, waiting and running together
  int64_t max_kv_tokens = 0;  // tokens its KV block pool holds
};

struct InstanceLoad {
  // Uncached prompt tokens still to prefill, over the requests queued or prefilling there,
  // and how many requests those are.
  int64_t queued_prefill_tokens = 0;
  int32_t prefill_requests = 0;
  int32_t waiting_requests = 0;   // admitted, not yet scheduled
  int32_t running_sequences = 0;  // in the running batch (prefilling or decoding)
  int64_t kv_tokens = 0;          // KV tokens held or reserved (incl. KV being pulled in)
  // Output tokens its running requests are still expected to produce (max_tokens or an
  // estimate, less what each has generated): KV that will be needed before it is freed.
  int64_t remaining_output_tokens = 0;
};

struct InstanceView {
  std::string id;
  InstanceRole role = InstanceRole::both;
  bool healthy = true;
  bool draining = false;  // finishes what it holds, takes nothing new
  // Operator's relative share of traffic (> 0; 1 for all in a uniform pool). Load-based
  // policies compare load / weight.
  double weight = 1.0;
  InstanceCapacity capacity;
  InstanceLoad load;
  // Prompt tokens of this request already in this instance's KV cache (from the proxy's
  // KV index): a prefix-cache hit it would not prefill again.
  int64_t matched_prefix_tokens = 0;
  PrefillTimeFit prefill_time;  // from this instance's PrefillLatencyModel
};

// Requests the instance holds: what load-balancing routers (SGLang's among them) call
// load. The proxy's own prefills in flight there count at once, before the instance's next
// report shows them waiting or running.
inline int64_t outstanding_requests(const InstanceView& v) {
  return std::max<int64_t>(int64_t(v.load.waiting_requests) + v.load.running_sequences, v.load.prefill_requests);
}

// Prompt tokens this instance would have to prefill. At least one: an engine recomputes
// the last prompt token even on a full hit, for its logits.
inline int64_t uncached_prompt_tokens(const InstanceView& v, const RoutingRequest& r) {
  return std::max<int64_t>(1, r.prompt_tokens - v.matched_prefix_tokens);
}

}  // namespace moe::routing
