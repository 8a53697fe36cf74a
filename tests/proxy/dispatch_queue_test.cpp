// The proxy's global queue (dispatch.h), without sockets: requests no instance can take
// wait, bounded, and are routed in order_queue's order as soon as the registry says an
// instance may take more; a request that waits too long gets 503.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "proxy/dispatch.h"
#include "proxy/request_estimate.h"

namespace moe::proxy {
namespace {

using namespace std::chrono_literals;

struct Queue {
  explicit Queue(DispatchConfig config = {})
      : registry({{"p0", "http://127.0.0.1:9", InstanceRole::prefill, 1.0}}),
        scheduler(registry, SchedulerConfig{routing::Policy::round_robin, {}, 1}),
        dispatch(registry, scheduler, config) {
    registry.set_draining("p0", true);
  }

  PdRequest request(const std::string& id, int64_t prompt_tokens, double age_s = 0) const {
    PdRequest r;
    r.routing = {id, prompt_tokens, 16, routing_seconds(Clock::now()) - age_s};
    return r;
  }

  // Each request's pick, spawned in order; `then` runs once they all wait.
  std::vector<std::string> run(const std::vector<PdRequest>& requests, std::function<void()> then) {
    std::vector<std::string> routed;
    for (const PdRequest& r : requests) {
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            const Picked p = co_await dispatch.pick(Leg::kPrefill, r, {});
            const std::string& id = r.routing.id;
            routed.push_back(p.route.instance ? id : id + ":" + (p.error ? p.error->code() : "?"));
          },
          asio::detached);
    }
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer t(io);
          for (int i = 0; i < 500 && dispatch.queued() < requests.size(); ++i) {
            t.expires_after(1ms);
            co_await t.async_wait(asio::use_awaitable);
          }
          then();
        },
        asio::detached);
    io.run();
    return routed;
  }

  asio::io_context io;
  Registry registry;
  Scheduler scheduler;
  Dispatch dispatch;
};

TEST(DispatchQueue, WaitingRequestsAreRoutedShortestPromptFirstOnceAnInstanceFrees) {
  Queue q;
  const auto order = q.run({q.request("long", 900), q.request("short", 10), q.request("mid", 200)}, [&] {
    EXPECT_EQ(q.dispatch.queued(), 3u);
    q.registry.set_draining("p0", false);
  });
  EXPECT_EQ(order, (std::vector<std::string>{"short", "mid", "long"}));
  EXPECT_EQ(q.dispatch.queued(), 0u);
}

TEST(DispatchQueue, ARequestPastTheAgingBoundGoesFirst) {
  Queue q;
  const auto order = q.run({q.request("short", 10), q.request("old-long", 900, 5.0)},
                           [&] { q.registry.set_draining("p0", false); });
  EXPECT_EQ(order, (std::vector<std::string>{"old-long", "short"}));
}

TEST(DispatchQueue, TheQueueIsBoundedAndAWaitEndsWith503) {
  DispatchConfig c;
  c.max_queued = 1;
  c.queue_timeout = 100ms;
  Queue q(c);
  const auto order = q.run({q.request("first", 10), q.request("second", 10)}, [] {});
  EXPECT_EQ(order, (std::vector<std::string>{"second:queue_full", "first:no_instance_available"}));
}

TEST(DispatchQueue, ARouteTakesTheLegsLoadUntilItIsDropped) {
  Queue q;
  q.registry.set_draining("p0", false);
  const InstancePtr p0 = q.registry.all()[0];
  std::optional<Picked> held;
  asio::co_spawn(
      q.io,
      [&]() -> asio::awaitable<void> {
        const PdRequest r = q.request("a", 10);
        held = co_await q.dispatch.pick(Leg::kPrefill, r, {});
      },
      asio::detached);
  q.io.run();
  ASSERT_TRUE(held && held->route.instance);
  EXPECT_EQ(q.registry.prefill_requests(*p0), 1);
  held.reset();
  EXPECT_EQ(q.registry.prefill_requests(*p0), 0);
}

TEST(DispatchQueue, APrefillsLoadIsThePartOfThePromptNotCachedThere) {
  Queue q;
  q.registry.set_draining("p0", false);
  std::optional<Picked> held;
  asio::co_spawn(
      q.io,
      [&]() -> asio::awaitable<void> {
        PdRequest r = q.request("a", 1000);
        r.matched_prefix = {{"p0", 960}};
        held = co_await q.dispatch.pick(Leg::kPrefill, r, {});
      },
      asio::detached);
  q.io.run();
  ASSERT_TRUE(held && held->route.instance);
  EXPECT_EQ(q.registry.snapshot(Clock::now()).views[0].load.queued_prefill_tokens, 40);
}

}  // namespace
}  // namespace moe::proxy
