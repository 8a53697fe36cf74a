#pragma once
// Whether a request skips disaggregation: it runs whole on a unified (`both`) instance
// when one is free and the request's uncached part there is small
//
//   free      : eligible for a whole request (eligibility.h) and nothing queued to prefill,
//               so the short prefill starts at once
//   small     : uncached_prompt_tokens <= skip_disagg_max_uncached_tokens
//   among them: the fewest uncached tokens, then the lowest token load per weight (as the
//               cost policy's decode stage), then the earlier instance.
//
// A short prefill costs a unified instance's decode batch about one step; the KV hand-off
// and a second hop would cost the request more than that. Long prompts still go to P,
// where they cannot stall anyone's decoding.
#include <span>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/policy_config.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing {

// With an instance: whole_request, reason "skip_disaggregation". Without: reason
// "disaggregate", and the detail says why not.
Decision skip_disaggregation(std::span<const InstanceView> instances, const RoutingRequest& request,
                             const PolicyConfig& config);

}  // namespace moe::routing
