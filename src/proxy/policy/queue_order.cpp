#include "proxy/policy/queue_order.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace moe::routing {

std::vector<size_t> order_queue(std::span<const RoutingRequest> queue, double now_s, const PolicyConfig& config) {
  std::vector<size_t> order(queue.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto key = [&](size_t i) {
    const RoutingRequest& r = queue[i];
    const bool aged = r.age_s(now_s) >= config.aging_bound_s;
    // Aged requests sort among themselves by arrival alone.
    return std::make_tuple(!aged, aged ? int64_t{0} : r.prompt_tokens, r.arrival_s, i);
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  return order;
}

}  // namespace moe::routing
