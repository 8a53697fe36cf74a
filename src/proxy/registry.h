#pragma once
// The instances behind the proxy and what it knows of each: role, weight, whether it is
// up (active /health probes plus a circuit breaker fed by the legs' failures), what it
// reported of its capacity and load, and the load the proxy itself has put on it
// (requests it routed there and that have not finished). Instances can be added, drained
// and removed while the proxy runs. Thread-safe; legs hold an instance by shared_ptr, so
// one removed mid-request stays valid until they are done with it.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/prometheus.h"
#include "dashboard/counter_rates.h"
#include "http/types.h"
#include "proxy/backends.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/prefill_latency_model.h"

namespace moe::proxy {

using Clock = std::chrono::steady_clock;
using routing::InstanceRole;

struct InstanceSpec {
  std::string name;  // unique; the URL when not given
  std::string url;   // http://HOST:PORT
  InstanceRole role = InstanceRole::both;
  double weight = 1.0;
  // The expert-parallel group it is a rank of (empty: none). A group's ranks stop and
  // start together, so one that is down takes the whole group out of routing.
  std::string group;
};

// "prefill", "decode", "both"; throws moe::Error naming the value otherwise.
InstanceRole parse_instance_role(const std::string& name);
const char* instance_role_name(InstanceRole role);

// An instance whose legs fail `failures_to_open` times in a row is taken out of routing
// for `open_for`; then one request may try it (half open): a success closes the breaker,
// a failure opens it again. A health probe that fails takes it out at once, one that
// answers puts it back.
struct BreakerConfig {
  int failures_to_open = 3;
  std::chrono::milliseconds open_for{5000};
};

// What an instance's GET /health says beyond "ok" (moengine serve's fields; absent ones
// stay 0, which routing reads as "not reported").
struct HealthReport {
  std::string engine_id;
  std::string kv_events;      // the instance's KV-events endpoint; empty when it publishes none
  int32_t max_sequences = 0;  // running plus waiting it takes before it refuses (429)
  int64_t kv_capacity_tokens = 0;
  int32_t running = 0, waiting = 0;
  int64_t kv_tokens_used = 0;
  // Counters since the instance started, and when it started (a new value is a restart).
  uint64_t requests_finished = 0, prompt_tokens = 0, generation_tokens = 0, kv_pulls = 0, kv_pulled_bytes = 0;
  double started_unix_s = 0;
};
// Reads a /health body; fields it lacks stay 0.
HealthReport parse_health_report(const nlohmann::json& body);
// A report's values of dashboard::health_rate_names(), in that order.
std::vector<uint64_t> health_rate_values(const HealthReport& r);

class Instance {
 public:
  Instance(InstanceSpec spec, Backend backend) : spec_(std::move(spec)), backend_(std::move(backend)) {}
  const std::string& name() const { return spec_.name; }
  const Backend& backend() const { return backend_; }
  InstanceRole role() const { return spec_.role; }
  const std::string& group() const { return spec_.group; }

 private:
  friend class Registry;
  const InstanceSpec spec_;
  const Backend backend_;

  // Under the registry's lock.
  double weight_ = 1.0;
  bool draining_ = false;
  bool removed_ = false;
  bool probe_ok_ = true;  // until the first probe says otherwise
  int consecutive_failures_ = 0;
  std::optional<Clock::time_point> open_until_;
  HealthReport reported_;
  int64_t restarts_ = 0;  // new start times its probes reported
  dashboard::CounterRates rates_{dashboard::health_rate_names()};  // of the reported totals, since its last start
  routing::InstanceLoad routed_;  // what the proxy has in flight there
  routing::PrefillLatencyModel prefill_model_;
};

using InstancePtr = std::shared_ptr<Instance>;

class Registry {
 public:
  // Throws moe::Error for a malformed URL or a duplicate name.
  // `connections`: the options of each instance's connection pool (Backend::connections).
  explicit Registry(const std::vector<InstanceSpec>& instances, BreakerConfig breaker = {},
                    http::HttpClientOptions connections = {});

  // Throws moe::Error as the constructor.
  InstancePtr add(InstanceSpec spec);
  // False when no instance has that name.
  bool set_draining(const std::string& name, bool draining);
  bool remove(const std::string& name);

  // The instances routing may consider, in a stable order, with their views.
  struct Snapshot {
    std::vector<InstancePtr> instances;
    std::vector<routing::InstanceView> views;
    std::map<std::string, bool> groups;  // each expert-parallel group: up
  };
  Snapshot snapshot(Clock::time_point now) const;
  std::vector<InstancePtr> all() const;

  // Health: a probe's answer (nullopt: it failed), and a leg's outcome.
  void report_probe(Instance& instance, const std::optional<HealthReport>& report, Clock::time_point now = Clock::now());
  // unreachable: the leg got no answer at all (refused, reset). A rank of an
  // expert-parallel group in that state is down until its probe answers again: its group
  // cannot serve without it, so it goes out of routing whole at once.
  void report_failure(Instance& instance, Clock::time_point now, bool unreachable = false);
  void report_success(Instance& instance);
  bool up(const Instance& instance, Clock::time_point now) const;

  // The proxy's own load on an instance, added when a leg is routed there and taken back
  // when it ends (see LoadTicket).
  void add_load(Instance& instance, const routing::InstanceLoad& delta, int sign);
  // A prefill that ran alone there (nothing else of this proxy's queued with it): its time
  // is the instance's own, and teaches its latency model.
  void observe_prefill(Instance& instance, int64_t new_tokens, int64_t cached_tokens, double seconds);
  int32_t prefill_requests(const Instance& instance) const;

  // Each instance's state, for /health and the admin API.
  nlohmann::json describe(Clock::time_point now) const;

  // Called (on the thread that caused it, outside the registry's lock) whenever an
  // instance may take more than before: a leg ended there, a probe answered, a failure
  // streak ended, an instance was added or stopped draining. Null: nobody is told.
  void on_capacity(std::function<void()> listener);

 private:
  InstancePtr find_locked(const std::string& name) const;
  // Its own probe and breaker say it is up.
  bool self_up_locked(const Instance& instance, Clock::time_point now) const;
  // And so does every rank of its group.
  bool up_locked(const Instance& instance, Clock::time_point now) const;
  void capacity_freed();

  const BreakerConfig breaker_;
  const http::HttpClientOptions connection_options_;
  mutable std::mutex mu_;
  std::vector<InstancePtr> instances_;
  std::mutex listener_mu_;
  std::function<void()> capacity_listener_;
};

// Per-instance gauges: up, draining, and the load the proxy has routed there; per
// expert-parallel group, whether it is up and its ranks.
void write_instance_metrics(PrometheusText& out, const Registry::Snapshot& s);

// The load a routed leg puts on its instance, taken back however the leg ends.
class LoadTicket {
 public:
  LoadTicket() = default;
  LoadTicket(Registry& registry, InstancePtr instance, const routing::InstanceLoad& load);
  ~LoadTicket();
  LoadTicket(LoadTicket&& other) noexcept;
  LoadTicket& operator=(LoadTicket&& other) noexcept;
  LoadTicket(const LoadTicket&) = delete;
  LoadTicket& operator=(const LoadTicket&) = delete;

  void release();

 private:
  Registry* registry_ = nullptr;
  InstancePtr instance_;
  routing::InstanceLoad load_;
};

}  // namespace moe::proxy
