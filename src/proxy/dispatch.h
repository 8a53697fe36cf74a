#pragma once
// What both ways of answering (whole and streamed) share around a leg: picking its
// instance, waiting (bounded) in the proxy's global queue while none can take it, the load
// it puts on that instance, and what its outcome tells the registry.
//
// The queue is served in routing::order_queue's order (shortest prompt first, requests
// waiting past the aging bound first of all), whenever the registry says an instance may
// take more (a leg ended, a probe answered, ...) and at least every queue_poll.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "proxy/errors.h"
#include "proxy/legs.h"
#include "proxy/prefix_index.h"
#include "proxy/registry.h"
#include "proxy/scheduler.h"

namespace moe::proxy {

struct DispatchConfig {
  int max_attempts = 3;  // instances one leg may be tried on
  // Requests waiting for an instance (all down, draining or full); one more is answered
  // 429 with Retry-After.
  size_t max_queued = 1024;
  std::chrono::milliseconds queue_timeout{30000};  // then 503
  // The longest a waiting request goes without a routing attempt: reported loads change
  // with probes, which do not wake the queue unless an instance came back.
  std::chrono::milliseconds queue_poll{100};
};

struct Picked {
  Route route;                    // route.instance set when one was found
  LoadTicket load;                // the leg's load there, for as long as this lives
  std::optional<ApiError> error;  // else why not (503, 429)
};

class Dispatch {
 public:
  // `prefix_index` (may be null) is told of each prompt routed to be prefilled.
  Dispatch(Registry& registry, Scheduler& scheduler, DispatchConfig config, PrefixIndex* prefix_index = nullptr);
  ~Dispatch();
  Dispatch(const Dispatch&) = delete;
  Dispatch& operator=(const Dispatch&) = delete;

  // An instance for the leg, with the leg's load on it taken. A retry (`exclude` not
  // empty) does not wait: with no other instance ready, the leg's last failure is the
  // client's answer.
  asio::awaitable<Picked> pick(Leg leg, const PdRequest& request, const std::vector<std::string>& exclude);
  // Whether the prefill leg just started there is the only one of this proxy's there: then
  // its time is the instance's own prefill time, and teaches its latency model.
  bool alone(const Instance& instance) const { return registry_.prefill_requests(instance) == 1; }

  // A leg's outcome: a failure that is the instance's (see instance_fault) counts toward
  // its circuit breaker; unreachable: it got no answer at all (see Registry::report_failure).
  void report(Instance& instance, bool failed, bool unreachable = false);

  Registry& registry() { return registry_; }
  const DispatchConfig& config() const { return config_; }
  size_t queued() const;

 private:
  struct Waiter;
  // Routes and takes the load; the decision is counted when it found an instance.
  Picked route(Leg leg, const PdRequest& request, const std::vector<std::string>& exclude);
  asio::awaitable<Picked> wait(Leg leg, const PdRequest& request);
  // Routes the waiting requests in order; each one routed is woken.
  void serve_queue();

  Registry& registry_;
  Scheduler& scheduler_;
  const DispatchConfig config_;
  PrefixIndex* const prefix_index_;
  mutable std::mutex queue_mu_;
  std::list<std::shared_ptr<Waiter>> waiting_;
};

// No answer, a 5xx, or 429 (the instance is full): another instance may do better. Other
// 4xx are the request's own fault and go to the client.
bool instance_fault(const LegResult& r);

}  // namespace moe::proxy
