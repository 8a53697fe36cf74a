#pragma once
// power_of_two: two distinct eligible instances drawn at random, the less loaded of them
// (requests / weight, as least_load). Almost as balanced as least_load, without every
// router herding onto the same instance between load updates.
#include <cstddef>
#include <span>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/routing_state.h"

namespace moe::routing {

// eligible: indices into instances, not empty. Draws from state.rng, so a seed fixes the
// sequence of choices. Ties go to the first drawn.
Decision power_of_two(std::span<const InstanceView> instances, std::span<const size_t> eligible, RoutingState& state);

}  // namespace moe::routing
