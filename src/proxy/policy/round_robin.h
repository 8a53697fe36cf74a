#pragma once
// round_robin: the eligible instances in turn, the baseline every router ships. It ignores
// load, prefix hits and weight by design.
#include <cstddef>
#include <span>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/routing_state.h"

namespace moe::routing {

// eligible: indices into instances, not empty. Advances state.turn.
Decision round_robin(std::span<const InstanceView> instances, std::span<const size_t> eligible, RoutingState& state);

}  // namespace moe::routing
