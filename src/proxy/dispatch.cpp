#include "proxy/dispatch.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "proxy/policy/queue_order.h"
#include "proxy/request_estimate.h"

namespace moe::proxy {

struct Dispatch::Waiter {
  Leg leg;
  // The waiting coroutine's: it outlives the waiter's time in the queue, and serve_queue
  // only reads waiters in the queue, under the lock that takes them out.
  const PdRequest* request;
  asio::any_io_executor executor;
  std::shared_ptr<asio::steady_timer> wake;  // on `executor`: cancelled to wake the waiter
  std::optional<Picked> picked;              // under queue_mu_: set by whoever routed it
};

Dispatch::Dispatch(Registry& registry, Scheduler& scheduler, DispatchConfig config, PrefixIndex* prefix_index)
    : registry_(registry), scheduler_(scheduler), config_(config), prefix_index_(prefix_index) {
  registry_.on_capacity([this] { serve_queue(); });
}

Dispatch::~Dispatch() { registry_.on_capacity(nullptr); }

size_t Dispatch::queued() const {
  std::lock_guard lock(queue_mu_);
  return waiting_.size();
}

Picked Dispatch::route(Leg leg, const PdRequest& pd, const std::vector<std::string>& exclude) {
  const routing::RoutingRequest& request = pd.routing;
  // Matched now rather than when the request arrived: prompts routed meanwhile count.
  const bool fresh = leg == Leg::kPrefill && prefix_index_ && pd.prompt_ids;
  const PrefixMatches matched = fresh ? prefix_index_->matched_tokens(*pd.prompt_ids) : pd.matched_prefix;
  Picked p;
  p.route = scheduler_.route(leg, request, exclude, matched);
  if (!p.route.instance) return p;
  scheduler_.count(leg, p.route);
  if (fresh) prefix_index_->note_routed(p.route.instance->name(), *pd.prompt_ids);
  routing::InstanceLoad load;
  if (leg == Leg::kPrefill) {
    // What the instance will compute: the prompt less the prefix it holds (at least the
    // last token, as uncached_prompt_tokens counts it).
    const auto held = matched.find(p.route.instance->name());
    load.queued_prefill_tokens = std::max<int64_t>(1, request.prompt_tokens - (held == matched.end() ? 0 : held->second));
    load.prefill_requests = 1;
  } else {
    load.running_sequences = 1;
    load.kv_tokens = request.prompt_tokens;
    load.remaining_output_tokens = request.expected_output_tokens;
  }
  p.load = LoadTicket(registry_, p.route.instance, load);
  return p;
}

asio::awaitable<Picked> Dispatch::pick(Leg leg, const PdRequest& request, const std::vector<std::string>& exclude) {
  Picked p = route(leg, request, exclude);
  // A retry finds every other instance tried already; where none at all is up either (the
  // only group of the role lost and restarting), it waits for one as a first attempt does.
  const bool waits =
      !p.route.instance && (exclude.empty() || !scheduler_.route(leg, request.routing, {}, request.matched_prefix).instance);
  if (!p.route.instance && !waits) scheduler_.count(leg, p.route);
  if (waits) p = co_await wait(leg, request);
  co_return p;
}

asio::awaitable<Picked> Dispatch::wait(Leg leg, const PdRequest& request) {
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  auto w = std::make_shared<Waiter>(Waiter{leg, &request, executor, std::make_shared<asio::steady_timer>(executor), {}});
  bool admitted = false;
  {
    std::lock_guard lock(queue_mu_);
    admitted = waiting_.size() < config_.max_queued;
    if (admitted) waiting_.push_back(w);
  }
  // However this ends (routed, timed out, the client gone), the request leaves the queue;
  // a route it was given meanwhile goes with it, its load ticket returned.
  struct Leave {
    Dispatch& d;
    const std::shared_ptr<Waiter>& w;
    ~Leave() {
      std::lock_guard lock(d.queue_mu_);
      d.waiting_.remove(w);
    }
  } leave{*this, w};
  Picked p;
  if (!admitted) {
    Route none;
    none.decision.reason = "queue_full";
    scheduler_.count(leg, none);
    p.error = proxy_queue_full(fmt::format("{} requests already wait for an instance", config_.max_queued));
  }
  const Clock::time_point deadline = Clock::now() + config_.queue_timeout;
  bool done = !admitted;
  while (!done) {
    w->wake->expires_at(std::min(deadline, Clock::now() + config_.queue_poll));
    co_await w->wake->async_wait(asio::as_tuple(asio::use_awaitable));
    const asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() == asio::cancellation_type::none) serve_queue();
    std::lock_guard lock(queue_mu_);
    if (w->picked) {
      p = std::move(*w->picked);
      w->picked.reset();
    }
    done = p.route.instance || cs.cancelled() != asio::cancellation_type::none || Clock::now() >= deadline;
  }
  if (admitted && !p.route.instance) {
    // The last attempt's decision says why none could take it.
    p.route = scheduler_.route(leg, request.routing, {}, request.matched_prefix);
    if (p.route.instance) {
      p = route(leg, request, {});
    } else {
      scheduler_.count(leg, p.route);
      p.error = no_instance(fmt::format("no {} instance could take the request within {} ms: {}", leg_name(leg),
                                        config_.queue_timeout.count(), p.route.decision.detail));
    }
  }
  co_return p;
}

void Dispatch::serve_queue() {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    std::lock_guard lock(queue_mu_);
    if (waiting_.empty()) return;
    std::vector<std::shared_ptr<Waiter>> queue(waiting_.begin(), waiting_.end());
    std::vector<routing::RoutingRequest> requests;
    requests.reserve(queue.size());
    for (const auto& w : queue) requests.push_back(w->request->routing);
    const double now = routing_seconds(Clock::now());
    for (const size_t i : routing::order_queue(requests, now, scheduler_.config().thresholds)) {
      const std::shared_ptr<Waiter>& w = queue[i];
      if (w->picked) continue;
      Picked p = route(w->leg, *w->request, {});
      if (!p.route.instance) continue;
      w->picked = std::move(p);
      waiting_.remove(w);
      woken.push_back(w);
    }
  }
  for (const auto& w : woken) asio::post(w->executor, [timer = w->wake] { timer->cancel(); });
}

void Dispatch::report(Instance& instance, bool failed, bool unreachable) {
  if (failed) {
    registry_.report_failure(instance, Clock::now(), unreachable);
  } else {
    registry_.report_success(instance);
  }
}

bool instance_fault(const LegResult& r) { return !r.response || r.response->status >= 500 || r.response->status == 429; }

}  // namespace moe::proxy
