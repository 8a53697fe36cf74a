#include "proxy/policy/eligibility.h"

#include <fmt/format.h>

namespace moe::routing {
namespace {

bool serves(InstanceRole role, Stage stage) {
  if (role == InstanceRole::both) return true;
  return (stage == Stage::prefill && role == InstanceRole::prefill) ||
         (stage == Stage::decode && role == InstanceRole::decode);
}

bool has_room(const InstanceView& v, const RoutingRequest& request, Stage stage) {
  const InstanceCapacity& cap = v.capacity;
  if (cap.max_sequences > 0 && outstanding_requests(v) >= cap.max_sequences) return false;
  const int64_t new_kv = stage == Stage::decode ? request.prompt_tokens : uncached_prompt_tokens(v, request);
  return cap.max_kv_tokens <= 0 || v.load.kv_tokens + new_kv <= cap.max_kv_tokens;
}

}  // namespace

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::prefill: return "prefill";
    case Stage::decode: return "decode";
    case Stage::unified: return "unified";
  }
  return "?";
}

Eligible eligible_instances(std::span<const InstanceView> instances, const RoutingRequest& request, Stage stage) {
  Eligible out;
  for (size_t i = 0; i < instances.size(); ++i) {
    const InstanceView& v = instances[i];
    if (!serves(v.role, stage))
      ++out.other_role;
    else if (!v.healthy)
      ++out.unhealthy;
    else if (v.draining)
      ++out.draining;
    else if (!(v.weight > 0))
      ++out.no_weight;
    else if (!has_room(v, request, stage))
      ++out.full;
    else
      out.indices.push_back(i);
  }
  return out;
}

Decision no_eligible_instance(const Eligible& eligible, Stage stage, size_t instances) {
  return {std::nullopt, false, "no_eligible_instance",
          fmt::format("no {} instance can take the request (of {}: {} of another role, {} unhealthy, {} "
                      "draining, {} with weight 0, {} full)",
                      stage_name(stage), instances, eligible.other_role, eligible.unhealthy, eligible.draining,
                      eligible.no_weight, eligible.full)};
}

}  // namespace moe::routing
