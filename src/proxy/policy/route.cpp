#include "proxy/policy/route.h"

#include <array>
#include <utility>

#include "core/error.h"
#include "proxy/policy/cache_aware.h"
#include "proxy/policy/cost.h"
#include "proxy/policy/eligibility.h"
#include "proxy/policy/least_load.h"
#include "proxy/policy/power_of_two.h"
#include "proxy/policy/round_robin.h"
#include "proxy/policy/skip_disaggregation.h"

namespace moe::routing {
namespace {

constexpr std::array<std::pair<std::string_view, Policy>, 5> kPolicies{{
    {"round_robin", Policy::round_robin},
    {"least_load", Policy::least_load},
    {"power_of_two", Policy::power_of_two},
    {"cache_aware", Policy::cache_aware},
    {"cost", Policy::cost},
}};

Decision route(std::span<const InstanceView> instances, const RoutingRequest& request, Policy policy,
               const PolicyConfig& config, RoutingState& state, Stage stage) {
  const Eligible eligible = eligible_instances(instances, request, stage);
  if (eligible.indices.empty()) return no_eligible_instance(eligible, stage, instances.size());
  switch (policy) {
    case Policy::round_robin: return round_robin(instances, eligible.indices, state);
    case Policy::least_load: return least_load(instances, eligible.indices);
    case Policy::power_of_two: return power_of_two(instances, eligible.indices, state);
    case Policy::cache_aware: return cache_aware(instances, eligible.indices, request, config);
    case Policy::cost:
      return stage == Stage::decode ? cost_decode(instances, eligible.indices, request)
                                    : cost_prefill(instances, eligible.indices, request, config);
  }
  fail("routing policy {} is not handled", int(policy));
}

}  // namespace

Policy parse_policy_name(std::string_view name) {
  for (const auto& [known, policy] : kPolicies)
    if (name == known) return policy;
  fail("unknown routing policy '{}' (expected round_robin, least_load, power_of_two, cache_aware or cost)", name);
}

std::string_view policy_name(Policy policy) {
  for (const auto& [name, known] : kPolicies)
    if (policy == known) return name;
  fail("routing policy {} has no name", int(policy));
}

Decision route_prefill(std::span<const InstanceView> instances, const RoutingRequest& request, Policy policy,
                       const PolicyConfig& config, RoutingState& state) {
  if (policy == Policy::cost) {
    Decision whole = skip_disaggregation(instances, request, config);
    if (whole.instance) return whole;
  }
  return route(instances, request, policy, config, state, Stage::prefill);
}

Decision route_decode(std::span<const InstanceView> instances, const RoutingRequest& request, Policy policy,
                      const PolicyConfig& config, RoutingState& state) {
  return route(instances, request, policy, config, state, Stage::decode);
}

}  // namespace moe::routing
