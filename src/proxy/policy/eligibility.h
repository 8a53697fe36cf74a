#pragma once
// Which instances may take a request at a stage, before any policy looks at load.
#include <cstddef>
#include <span>
#include <vector>

#include "proxy/policy/decision.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/routing_request.h"

namespace moe::routing {

// prefill and decode are the legs of a disaggregated request; unified is a whole request.
// A unified (`both`) instance can serve any of the three.
enum class Stage { prefill, decode, unified };

const char* stage_name(Stage stage);

struct Eligible {
  std::vector<size_t> indices;  // into the instances given, in their order
  // Why the others are out: for the message when none is left.
  int other_role = 0, unhealthy = 0, draining = 0, no_weight = 0, full = 0;
};

// Healthy, not draining, weight > 0, of a role that serves the stage, and with room: fewer
// requests than max_sequences, and KV room for the prompt tokens it would hold now (the
// uncached ones at prefill, where the hit is already held; the whole prompt at decode,
// where it arrives from P). Expected output is not a condition: the engine admits on the
// prompt, and the decode policy balances the rest.
Eligible eligible_instances(std::span<const InstanceView> instances, const RoutingRequest& request, Stage stage);

// The decision when `eligible` is empty: reason "no_eligible_instance", and the count of
// each cause in the detail.
Decision no_eligible_instance(const Eligible& eligible, Stage stage, size_t instances);

}  // namespace moe::routing
