#pragma once
// The proxy's routing: the registry's snapshot, through the chosen policy
// (proxy/policy/route.h), to an instance for each leg, with the decisions that stood
// counted by leg, policy and reason. Instances a request already failed on are left out of its retries.
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/prometheus.h"
#include "proxy/policy/policy_config.h"
#include "proxy/policy/route.h"
#include "proxy/policy/routing_state.h"
#include "proxy/proxy_metrics.h"
#include "proxy/registry.h"

namespace moe::proxy {

struct SchedulerConfig {
  routing::Policy policy = routing::Policy::cost;
  routing::PolicyConfig thresholds;
  uint64_t seed = 1;  // power_of_two's draws
};

// Prompt tokens each instance already holds, by instance name (prefix_index.h).
using PrefixMatches = std::map<std::string, int64_t>;

struct Route {
  InstancePtr instance;  // null when no instance is eligible: decision.detail says why
  routing::Decision decision;
};

class Scheduler {
 public:
  Scheduler(Registry& registry, SchedulerConfig config);

  // Thread-safe. Counts nothing: a request may be routed many times while it waits.
  Route route(Leg leg, const routing::RoutingRequest& request, const std::vector<std::string>& exclude,
              const PrefixMatches& matched = {});
  // The decision that stood for a request's leg (thread-safe).
  void count(Leg leg, const Route& route);

  routing::Policy policy() const { return config_.policy; }
  // proxy_routing_decisions_total as JSON: {"policy", "decisions": [{"leg", "reason", "count"}]}.
  nlohmann::json decisions_json() const;
  const SchedulerConfig& config() const { return config_; }
  void write_metrics(PrometheusText& out) const;

 private:
  Registry& registry_;
  const SchedulerConfig config_;
  mutable std::mutex mu_;
  routing::RoutingState prefill_state_, decode_state_;
  std::map<std::pair<std::string, std::string>, uint64_t> decisions_;  // (leg, reason)
};

}  // namespace moe::proxy
