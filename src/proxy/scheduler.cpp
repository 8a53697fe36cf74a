#include "proxy/scheduler.h"

#include <algorithm>

namespace moe::proxy {

Scheduler::Scheduler(Registry& registry, SchedulerConfig config) : registry_(registry), config_(config) {
  prefill_state_.rng = config_.seed;
  decode_state_.rng = config_.seed ^ 0x5deece66dull;
}

Route Scheduler::route(Leg leg, const routing::RoutingRequest& request, const std::vector<std::string>& exclude,
                       const PrefixMatches& matched) {
  Registry::Snapshot s = registry_.snapshot(Clock::now());
  for (routing::InstanceView& v : s.views) {
    if (std::find(exclude.begin(), exclude.end(), v.id) != exclude.end()) v.healthy = false;
    if (const auto it = matched.find(v.id); it != matched.end()) v.matched_prefix_tokens = std::min(it->second, request.prompt_tokens);
  }
  std::lock_guard lock(mu_);
  Route r;
  r.decision = leg == Leg::kPrefill
                   ? routing::route_prefill(s.views, request, config_.policy, config_.thresholds, prefill_state_)
                   : routing::route_decode(s.views, request, config_.policy, config_.thresholds, decode_state_);
  if (r.decision.instance) r.instance = s.instances[*r.decision.instance];
  return r;
}

void Scheduler::count(Leg leg, const Route& route) {
  std::lock_guard lock(mu_);
  ++decisions_[{leg_name(leg), route.decision.reason}];
}

void Scheduler::write_metrics(PrometheusText& out) const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<PrometheusText::Labels, double>> rows;
  for (const auto& [key, n] : decisions_) {
    rows.push_back({{{"leg", key.first}, {"policy", std::string(routing::policy_name(config_.policy))}, {"reason", key.second}},
                    double(n)});
  }
  out.samples("proxy_routing_decisions_total", "Routing decisions by leg, policy and reason.", "counter", rows);
}

nlohmann::json Scheduler::decisions_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, n] : decisions_) rows.push_back({{"leg", key.first}, {"reason", key.second}, {"count", n}});
  return {{"policy", std::string(routing::policy_name(config_.policy))}, {"decisions", rows}};
}

}  // namespace moe::proxy
