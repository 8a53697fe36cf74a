#include "proxy/policy/least_load.h"

#include <fmt/format.h>

namespace moe::routing {

double request_load(const InstanceView& v) { return double(outstanding_requests(v)) / v.weight; }

Decision least_load(std::span<const InstanceView> instances, std::span<const size_t> eligible) {
  size_t best = eligible[0];
  for (size_t i : eligible)
    if (request_load(instances[i]) < request_load(instances[best])) best = i;
  return {best, false, "least_load",
          fmt::format("{}: {} requests, weight {}", instances[best].id, outstanding_requests(instances[best]),
                      instances[best].weight)};
}

}  // namespace moe::routing
