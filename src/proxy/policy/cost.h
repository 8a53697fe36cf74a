#pragma once
// cost, the default: each stage weighs what a request really costs there.
//
// Prefill: the earliest estimated finish, through each instance's own latency model
//
//   finish(p) = queue_seconds(queued_prefill_tokens, prefill_requests)
//             + seconds(uncached, cached)
//   uncached  = max(1, prompt_tokens - matched_prefix_tokens), cached = prompt - uncached
//
// so a prefix hit pulls a request to the instance holding it exactly as far as the saved
// prefill is worth, and no further than the queue in front of it allows; and long prompts
// spread, since each one lengthens the queue it joins. Ties: more cached, then earlier.
//
// Decode: the lowest token load, relative to what the instance can hold
//
//   load(d) = (kv_tokens + remaining_output_tokens + prompt_tokens + expected_output_tokens)
//             / (weight * max_kv_tokens)
//
// i.e. the KV each instance will need at once if every sequence runs to its expected
// length, this one included, so one long sequence counts as much as many short ones. When
// any eligible instance does not report max_kv_tokens, the fractions would not compare
// and the denominator is the weight alone. The sequence and KV limits are hard (see
// eligibility.h). Ties: fewer requests, then earlier.
#include <cstddef>
#include <span>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing {

double prefill_finish_s(const InstanceView& v, const RoutingRequest& request);
// Tokens, not yet divided by weight or capacity.
int64_t projected_token_load(const InstanceView& v, const RoutingRequest& request);

// eligible: indices into instances, not empty.
Decision cost_prefill(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                      const RoutingRequest& request);
Decision cost_decode(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                     const RoutingRequest& request);

}  // namespace moe::routing
