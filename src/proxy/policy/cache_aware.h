#pragma once
// cache_aware: the approach of SGLang's router, on our KV index instead of its
// approximate radix tree. With load = outstanding requests / weight over the eligible:
//
//   imbalanced  = max_load - min_load > balance_abs_threshold
//                 and max_load > balance_rel_threshold * min_load
//   imbalanced              -> least loaded                       (reason "imbalanced")
//   else match_ratio >= t   -> the longest prefix match           (reason "prefix_match")
//   else                    -> least loaded                       (reason "low_match")
//
//   match_ratio = matched_prefix_tokens / prompt_tokens of the best match, t = cache_threshold
//
// Its blind spots, which the cost policy removes: load counts requests, not tokens, so a
// P queueing a few very long prompts looks as free as one queueing short ones; and while
// the pool counts as balanced, a prefix hit wins however much work waits in front of it.
#include <cstddef>
#include <span>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/policy_config.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing {

// eligible: indices into instances, not empty. Ties on the match go to the less loaded,
// then to the earlier instance.
Decision cache_aware(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                     const RoutingRequest& request, const PolicyConfig& config);

}  // namespace moe::routing
