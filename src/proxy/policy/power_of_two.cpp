#include "proxy/policy/power_of_two.h"

#include <fmt/format.h>

#include "proxy/policy/least_load.h"

namespace moe::routing {

Decision power_of_two(std::span<const InstanceView> instances, std::span<const size_t> eligible, RoutingState& state) {
  const size_t n = eligible.size();
  if (n == 1)
    return {eligible[0], false, "power_of_two", fmt::format("{}: the only eligible", instances[eligible[0]].id)};
  const size_t first = size_t(state.next_random() % n);
  size_t second = size_t(state.next_random() % (n - 1));
  if (second >= first) ++second;  // distinct, and uniform over the others
  const InstanceView& a = instances[eligible[first]];
  const InstanceView& b = instances[eligible[second]];
  const bool take_b = request_load(b) < request_load(a);
  const size_t pick = eligible[take_b ? second : first];
  return {pick, false, "power_of_two",
          fmt::format("{}: {} requests against {}'s {}", instances[pick].id, outstanding_requests(take_b ? b : a),
                      (take_b ? a : b).id, outstanding_requests(take_b ? a : b))};
}

}  // namespace moe::routing
