#pragma once
// What both ways of answering (whole and streamed) share around a leg: picking its
// instance, waiting (bounded) in the proxy's queue while none can take it, the load it puts
// on that instance, and what its outcome tells the registry.
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "proxy/errors.h"
#include "proxy/legs.h"
#include "proxy/registry.h"
#include "proxy/scheduler.h"

namespace moe::proxy {

struct DispatchConfig {
  int max_attempts = 3;  // instances one leg may be tried on
  // Requests waiting for an instance (all down, draining or full); one more is answered
  // 429 with Retry-After.
  size_t max_queued = 1024;
  std::chrono::milliseconds queue_timeout{30000};  // then 503
  std::chrono::milliseconds queue_poll{20};
};

struct Picked {
  Route route;                    // route.instance set when one was found
  std::optional<ApiError> error;  // else why not (503, 429)
};

class Dispatch {
 public:
  Dispatch(Registry& registry, Scheduler& scheduler, DispatchConfig config)
      : registry_(registry), scheduler_(scheduler), config_(config) {}

  // A retry (`exclude` not empty) does not wait: with no other instance ready, the leg's
  // last failure is the client's answer.
  asio::awaitable<Picked> pick(Leg leg, const routing::RoutingRequest& request, const std::vector<std::string>& exclude,
                               const PrefixMatches& matched);

  // The load a leg puts on its instance while it runs.
  LoadTicket prefill_load(const InstancePtr& instance, const routing::RoutingRequest& request);
  LoadTicket decode_load(const InstancePtr& instance, const routing::RoutingRequest& request);
  // Whether the prefill leg just started there is the only one of this proxy's there: then
  // its time is the instance's own prefill time, and teaches its latency model.
  bool alone(const Instance& instance) const { return registry_.prefill_requests(instance) == 1; }

  // A leg's outcome: a failure that is the instance's (see instance_fault) counts toward
  // its circuit breaker.
  void report(Instance& instance, bool failed);

  Registry& registry() { return registry_; }
  const DispatchConfig& config() const { return config_; }
  size_t queued() const { return queued_; }

 private:
  Registry& registry_;
  Scheduler& scheduler_;
  const DispatchConfig config_;
  std::atomic<size_t> queued_{0};
};

// No answer, a 5xx, or 429 (the instance is full): another instance may do better. Other
// 4xx are the request's own fault and go to the client.
bool instance_fault(const LegResult& r);

}  // namespace moe::proxy
