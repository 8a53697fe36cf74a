// The global queue's order: shortest prompt first, bounded by aging.
#include <gtest/gtest.h>

#include <vector>

#include "proxy/policy/queue_order.h"
#include "routing/pool.h"

namespace moe::routing {
namespace {

using testing::request;

TEST(OrderQueue, ShortestPromptFirst) {
  const std::vector<RoutingRequest> queue{request(5000, 0, 0.0), request(100, 0, 0.1), request(2000, 0, 0.2),
                                          request(100, 0, 0.05)};
  EXPECT_EQ(order_queue(queue, 0.5, {}), (std::vector<size_t>{3, 1, 2, 0}));
}

TEST(OrderQueue, AgedRequestsGoFirstOldestFirst) {
  const std::vector<RoutingRequest> queue{request(100, 0, 1.5), request(3000, 0, 0.6), request(9000, 0, 0.0),
                                          request(50, 0, 1.0)};
  // At 1.6 s with the 1 s bound, the 9,000- and 3,000-token prompts are aged, the 50-token
  // one (age 0.6) is not.
  EXPECT_EQ(order_queue(queue, 1.6, {}), (std::vector<size_t>{2, 1, 3, 0}));
  PolicyConfig patient;
  patient.aging_bound_s = 10;
  EXPECT_EQ(order_queue(queue, 1.6, patient), (std::vector<size_t>{3, 0, 1, 2}));
}

// A long prompt in a steady stream of short ones, served one per 0.1 s from the head of
// the queue: it waits no longer than the aging bound plus one service.
TEST(OrderQueue, ALongPromptIsNotStarved) {
  std::vector<RoutingRequest> queue{request(20000, 0, 0.0)};
  queue[0].id = "long";
  const PolicyConfig config;
  double served_at = -1;
  for (int step = 0; step < 100 && served_at < 0; ++step) {
    const double now = 0.1 * step;
    queue.push_back(request(100, 0, now));
    queue.push_back(request(100, 0, now));  // arrivals outpace service: shortest-first alone starves
    const size_t head = order_queue(queue, now, config)[0];
    if (queue[head].id == "long") served_at = now;
    queue.erase(queue.begin() + std::ptrdiff_t(head));
  }
  ASSERT_GE(served_at, 0) << "never served";
  EXPECT_GE(served_at, config.aging_bound_s - 1e-9);
  EXPECT_LE(served_at, config.aging_bound_s + 0.1 + 1e-9);
}

TEST(OrderQueue, EmptyQueue) { EXPECT_TRUE(order_queue({}, 0, {}).empty()); }

}  // namespace
}  // namespace moe::routing
