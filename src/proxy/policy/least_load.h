#pragma once
// least_load: the eligible instance holding the fewest requests per unit weight, the load
// measure SGLang's router uses. It counts requests, not tokens: a 30,000-token
// prompt weighs what a 10-token one does, which is the weakness the cost policy fixes.
#include <cstddef>
#include <span>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"

namespace moe::routing {

// outstanding_requests / weight.
double request_load(const InstanceView& v);

// eligible: indices into instances, not empty. Ties go to the earlier instance.
Decision least_load(std::span<const InstanceView> instances, std::span<const size_t> eligible);

}  // namespace moe::routing
