#pragma once
// cost, the default: each stage weighs what a request really costs there.
//
// Prefill: the lowest estimated finish plus the capacity the request takes, through each
// instance's own latency model
//
//   cost(p)   = finish(p) + capacity_weight * own(p)
//   finish(p) = queue_seconds(queued_prefill_tokens, prefill_requests) + own(p)
//   own(p)    = seconds(uncached, cached)
//   uncached  = max(1, prompt_tokens - matched_prefix_tokens), cached = prompt - uncached
//
// so a prefix hit pulls a request to the instance holding it as far as the saved prefill is
// worth, to this request (its finish) and to those after it (the compute left to them), and
// no further than the queue in front of it allows; long prompts spread, since each one
// lengthens the queue it joins. Ties: more cached, then earlier.
// An instance not yet observed prefilling is timed by the curve of its eligible peers that
// have been (their mean, weighted by observations), not by the prior: the prior's level is
// a guess, and against peers measured slower than it an unobserved instance would look
// fastest and take every prompt, while, busy, it could not measure itself (the proxy
// learns only from prefills that ran alone at their instance).
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
#include <optional>
#include <span>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/policy_config.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing {

// speed: v's own fit, or its peers' (prefill_speed).
double prefill_finish_s(const InstanceView& v, const PrefillTimeFit& speed, const RoutingRequest& request);
// The observation-weighted mean curve of the eligible instances with observations; none
// when no instance has been observed.
std::optional<PrefillTimeFit> observed_peers_speed(std::span<const InstanceView> instances,
                                                   std::span<const size_t> eligible);
// v's own curve once it has been observed, else its observed peers' (when there are any).
const PrefillTimeFit& prefill_speed(const InstanceView& v, const std::optional<PrefillTimeFit>& peers);
// Tokens, not yet divided by weight or capacity.
int64_t projected_token_load(const InstanceView& v, const RoutingRequest& request);

// eligible: indices into instances, not empty.
Decision cost_prefill(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                      const RoutingRequest& request, const PolicyConfig& config);
Decision cost_decode(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                     const RoutingRequest& request);

}  // namespace moe::routing
