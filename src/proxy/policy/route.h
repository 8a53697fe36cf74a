#pragma once
// The routing entry points: pick the policy by name, and route each leg of a request.
// Everything the policies need comes in as arguments, so the proxy, the cluster simulator
// and the tests call the same functions. See docs/proxy.md for the formulas.
#include <span>
#include <string_view>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/policy_config.h"
#include "proxy/policy/routing_request.h"
#include "proxy/policy/routing_state.h"

namespace moe::routing {

enum class Policy { round_robin, least_load, power_of_two, cache_aware, cost };

// "round_robin", "least_load", "power_of_two", "cache_aware" or "cost"; throws moe::Error
// naming the valid ones for anything else.
Policy parse_policy_name(std::string_view name);
std::string_view policy_name(Policy policy);

// The prefill leg, among prefill and unified instances that are eligible (eligibility.h).
// Under `cost`, a short request may instead go whole to a free unified instance
// (skip_disaggregation.h; the decision then has whole_request set). Without an eligible
// instance: no instance, reason "no_eligible_instance".
Decision route_prefill(std::span<const InstanceView> instances, const RoutingRequest& request, Policy policy,
                       const PolicyConfig& config, RoutingState& state);

// The decode leg, among decode and unified instances that are eligible.
Decision route_decode(std::span<const InstanceView> instances, const RoutingRequest& request, Policy policy,
                      const PolicyConfig& config, RoutingState& state);

}  // namespace moe::routing
