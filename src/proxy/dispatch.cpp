#include "proxy/dispatch.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

namespace moe::proxy {

namespace {

// Counts a request in the queue for as long as it waits there.
struct QueueSlot {
  std::atomic<size_t>& queued;
  bool admitted;
  QueueSlot(std::atomic<size_t>& q, size_t limit) : queued(q), admitted(++q <= limit) {}
  ~QueueSlot() { --queued; }
};

}  // namespace

asio::awaitable<Picked> Dispatch::pick(Leg leg, const routing::RoutingRequest& request,
                                       const std::vector<std::string>& exclude, const PrefixMatches& matched) {
  Picked p;
  p.route = scheduler_.route(leg, request, exclude, matched);
  if (!p.route.instance && exclude.empty()) {
    QueueSlot slot(queued_, config_.max_queued);
    if (!slot.admitted) {
      p.error = proxy_queue_full(fmt::format("{} requests already wait for an instance", config_.max_queued));
    } else {
      asio::steady_timer timer(co_await asio::this_coro::executor);
      const Clock::time_point deadline = Clock::now() + config_.queue_timeout;
      while (!p.route.instance && Clock::now() < deadline) {
        timer.expires_after(config_.queue_poll);
        co_await timer.async_wait(asio::use_awaitable);
        p.route = scheduler_.route(leg, request, exclude, matched);
      }
      if (!p.route.instance) {
        p.error = no_instance(fmt::format("no {} instance could take the request within {} ms: {}", leg_name(leg),
                                          config_.queue_timeout.count(), p.route.decision.detail));
      }
    }
  }
  co_return p;
}

LoadTicket Dispatch::prefill_load(const InstancePtr& instance, const routing::RoutingRequest& request) {
  routing::InstanceLoad load;
  load.queued_prefill_tokens = request.prompt_tokens;
  load.prefill_requests = 1;
  return LoadTicket(registry_, instance, load);
}

LoadTicket Dispatch::decode_load(const InstancePtr& instance, const routing::RoutingRequest& request) {
  routing::InstanceLoad load;
  load.running_sequences = 1;
  load.kv_tokens = request.prompt_tokens;
  load.remaining_output_tokens = request.expected_output_tokens;
  return LoadTicket(registry_, instance, load);
}

void Dispatch::report(Instance& instance, bool failed) {
  if (failed) {
    registry_.report_failure(instance, Clock::now());
  } else {
    registry_.report_success(instance);
  }
}

bool instance_fault(const LegResult& r) { return !r.response || r.response->status >= 500 || r.response->status == 429; }

}  // namespace moe::proxy
