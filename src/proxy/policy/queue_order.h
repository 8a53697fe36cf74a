#pragma once
// The order in which requests waiting in the proxy's global queue get routed: shortest
// prompt first, which minimizes the mean wait and keeps short requests' TTFT low behind a
// burst of long ones, bounded by aging so a long prompt is not starved:
//
//   1. requests waiting longer than aging_bound_s (age >= bound), oldest first
//   2. the rest by prompt_tokens, fewest first; ties by arrival, then queue position
//
// A request therefore waits at most aging_bound_s plus the time to serve the aged
// requests in front of it.
#include <cstddef>
#include <span>
#include <vector>

#include "proxy/policy/policy_config.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing {

// Positions in `queue`, in the order to serve them.
std::vector<size_t> order_queue(std::span<const RoutingRequest> queue, double now_s, const PolicyConfig& config);

}  // namespace moe::routing
