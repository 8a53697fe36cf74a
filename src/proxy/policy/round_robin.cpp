#include "proxy/policy/round_robin.h"

#include <fmt/format.h>

namespace moe::routing {

Decision round_robin(std::span<const InstanceView> instances, std::span<const size_t> eligible, RoutingState& state) {
  const uint64_t turn = state.turn++;
  const size_t pick = eligible[turn % eligible.size()];
  return {pick, false, "round_robin",
          fmt::format("{}: turn {} over {} eligible", instances[pick].id, turn, eligible.size())};
}

}  // namespace moe::routing
