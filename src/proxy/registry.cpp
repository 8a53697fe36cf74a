#include "proxy/registry.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace moe::proxy {

namespace {

void apply(routing::InstanceLoad& to, const routing::InstanceLoad& d, int sign) {
  to.queued_prefill_tokens += sign * d.queued_prefill_tokens;
  to.prefill_requests += sign * d.prefill_requests;
  to.waiting_requests += sign * d.waiting_requests;
  to.running_sequences += sign * d.running_sequences;
  to.kv_tokens += sign * d.kv_tokens;
  to.remaining_output_tokens += sign * d.remaining_output_tokens;
}

template <typename T>
T field(const nlohmann::json& j, const char* outer, const char* inner) {
  const auto o = j.find(outer);
  if (o == j.end() || !o->is_object()) return 0;
  const auto i = o->find(inner);
  return i != o->end() && i->is_number() ? i->get<T>() : 0;
}

}  // namespace

InstanceRole parse_instance_role(const std::string& name) {
  if (name == "prefill") return InstanceRole::prefill;
  if (name == "decode") return InstanceRole::decode;
  if (name == "both") return InstanceRole::both;
  fail("unknown instance role '{}' (expected prefill, decode or both)", name);
}

const char* instance_role_name(InstanceRole role) {
  switch (role) {
    case InstanceRole::prefill: return "prefill";
    case InstanceRole::decode: return "decode";
    case InstanceRole::both: break;
  }
  return "both";
}

HealthReport parse_health_report(const nlohmann::json& body) {
  HealthReport r;
  if (!body.is_object()) return r;
  if (const auto id = body.find("engine_id"); id != body.end() && id->is_string()) r.engine_id = id->get<std::string>();
  if (const auto kv = body.find("kv_events"); kv != body.end() && kv->is_string()) r.kv_events = kv->get<std::string>();
  r.max_sequences = field<int32_t>(body, "capacity", "max_sequences");
  r.kv_capacity_tokens = field<int64_t>(body, "capacity", "kv_tokens");
  r.running = field<int32_t>(body, "load", "running");
  r.waiting = field<int32_t>(body, "load", "waiting");
  r.kv_tokens_used = field<int64_t>(body, "load", "kv_tokens");
  r.requests_finished = field<uint64_t>(body, "totals", "requests_finished");
  r.prompt_tokens = field<uint64_t>(body, "totals", "prompt_tokens");
  r.generation_tokens = field<uint64_t>(body, "totals", "generation_tokens");
  r.kv_pulls = field<uint64_t>(body, "totals", "kv_pulls");
  r.kv_pulled_bytes = field<uint64_t>(body, "totals", "kv_pulled_bytes");
  if (const auto t = body.find("started_unix_s"); t != body.end() && t->is_number()) r.started_unix_s = t->get<double>();
  return r;
}

std::vector<uint64_t> health_rate_values(const HealthReport& r) {
  return {r.requests_finished, r.prompt_tokens, r.generation_tokens, r.kv_pulled_bytes};
}

Registry::Registry(const std::vector<InstanceSpec>& instances, BreakerConfig breaker, http::HttpClientOptions connections)
    : breaker_(breaker), connection_options_(connections) {
  for (const InstanceSpec& spec : instances) add(spec);
}

InstancePtr Registry::add(InstanceSpec spec) {
  while (spec.url.ends_with('/')) spec.url.pop_back();
  if (spec.name.empty()) spec.name = spec.url;
  if (!(spec.weight > 0)) fail("instance {}: weight must be more than 0, got {}", spec.name, spec.weight);
  Backend backend{spec.url, {}, nullptr};
  try {
    backend.base = http::parse_url(spec.url);
  } catch (const Error& e) {
    fail("instance {}: {}", spec.name, e.what());
  }
  backend.connections = std::make_shared<http::HttpClient>(backend.base, connection_options_);
  const double weight = spec.weight;
  auto instance = std::make_shared<Instance>(std::move(spec), std::move(backend));
  instance->weight_ = weight;
  std::lock_guard lock(mu_);
  if (find_locked(instance->name())) fail("an instance named {} is already registered", instance->name());
  instances_.push_back(instance);
  return instance;
}

InstancePtr Registry::find_locked(const std::string& name) const {
  for (const InstancePtr& i : instances_) {
    if (i->name() == name) return i;
  }
  return nullptr;
}

bool Registry::set_draining(const std::string& name, bool draining) {
  InstancePtr i;
  {
    std::lock_guard lock(mu_);
    i = find_locked(name);
    if (i) i->draining_ = draining;
  }
  if (i && !draining) capacity_freed();
  return bool(i);
}

bool Registry::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  const auto it = std::find_if(instances_.begin(), instances_.end(), [&](const InstancePtr& i) { return i->name() == name; });
  if (it == instances_.end()) return false;
  (*it)->removed_ = true;
  instances_.erase(it);
  return true;
}

bool Registry::self_up_locked(const Instance& i, Clock::time_point now) const {
  return i.probe_ok_ && (!i.open_until_ || now >= *i.open_until_);
}

bool Registry::up_locked(const Instance& i, Clock::time_point now) const {
  if (!self_up_locked(i, now)) return false;
  if (i.group().empty()) return true;
  return std::all_of(instances_.begin(), instances_.end(),
                     [&](const InstancePtr& o) { return o->group() != i.group() || self_up_locked(*o, now); });
}

bool Registry::up(const Instance& instance, Clock::time_point now) const {
  std::lock_guard lock(mu_);
  return up_locked(instance, now);
}

Registry::Snapshot Registry::snapshot(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  Snapshot s;
  s.instances = instances_;
  s.views.reserve(instances_.size());
  // A group is down when any of its ranks is: found in one pass, not per rank.
  std::map<std::string, bool> group_up;
  for (const InstancePtr& i : instances_) {
    if (i->group().empty()) continue;
    auto [it, added] = group_up.emplace(i->group(), true);
    it->second = it->second && self_up_locked(*i, now);
  }
  s.groups = group_up;
  for (const InstancePtr& i : instances_) {
    routing::InstanceView v;
    v.id = i->name();
    v.role = i->role();
    v.healthy = self_up_locked(*i, now) && (i->group().empty() || group_up[i->group()]);
    v.draining = i->draining_;
    v.weight = i->weight_;
    v.capacity.max_sequences = i->reported_.max_sequences;
    v.capacity.max_kv_tokens = i->reported_.kv_capacity_tokens;
    // The proxy's own requests there are known at once; what the instance last reported
    // may include other clients' (and lags by a probe interval).
    v.load = i->routed_;
    v.load.waiting_requests = std::max(i->routed_.waiting_requests, i->reported_.waiting);
    v.load.running_sequences = std::max(i->routed_.running_sequences, i->reported_.running);
    v.load.kv_tokens = std::max(i->routed_.kv_tokens, i->reported_.kv_tokens_used);
    v.prefill_time = i->prefill_model_.fit();
    s.views.push_back(std::move(v));
  }
  return s;
}

std::vector<InstancePtr> Registry::all() const {
  std::lock_guard lock(mu_);
  return instances_;
}

void Registry::report_probe(Instance& instance, const std::optional<HealthReport>& report, Clock::time_point now) {
  {
    std::lock_guard lock(mu_);
    auto& i = instance;
    i.probe_ok_ = report.has_value();
    if (!report) return;
    if (i.reported_.started_unix_s != 0 && report->started_unix_s != i.reported_.started_unix_s) {
      ++i.restarts_;
      i.rates_.clear();
    }
    i.reported_ = *report;
    i.rates_.add(now, health_rate_values(*report));
    // An instance that answers its probe again is given traffic again at once.
    i.open_until_.reset();
    i.consecutive_failures_ = 0;
  }
  capacity_freed();
}

void Registry::report_failure(Instance& instance, Clock::time_point now, bool unreachable) {
  std::lock_guard lock(mu_);
  auto& i = instance;
  if (unreachable && !i.group().empty()) i.probe_ok_ = false;
  const bool half_open = i.open_until_ && now >= *i.open_until_;
  if (++i.consecutive_failures_ >= breaker_.failures_to_open || half_open) i.open_until_ = now + breaker_.open_for;
}

void Registry::report_success(Instance& instance) {
  {
    std::lock_guard lock(mu_);
    auto& i = instance;
    i.consecutive_failures_ = 0;
    i.open_until_.reset();
  }
  capacity_freed();
}

void Registry::add_load(Instance& instance, const routing::InstanceLoad& delta, int sign) {
  {
    std::lock_guard lock(mu_);
    apply(instance.routed_, delta, sign);
  }
  if (sign < 0) capacity_freed();
}

void Registry::on_capacity(std::function<void()> listener) {
  std::lock_guard lock(listener_mu_);
  capacity_listener_ = std::move(listener);
}

void Registry::capacity_freed() {
  std::function<void()> listener;
  {
    std::lock_guard lock(listener_mu_);
    listener = capacity_listener_;
  }
  if (listener) listener();
}

void Registry::observe_prefill(Instance& instance, int64_t new_tokens, int64_t cached_tokens, double seconds) {
  std::lock_guard lock(mu_);
  instance.prefill_model_.observe(new_tokens, cached_tokens, seconds);
}

int32_t Registry::prefill_requests(const Instance& instance) const {
  std::lock_guard lock(mu_);
  return instance.routed_.prefill_requests;
}

nlohmann::json Registry::describe(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const InstancePtr& i : instances_) {
    const routing::PrefillTimeFit& fit = i->prefill_model_.fit();
    list.push_back({{"name", i->name()},
                    {"url", i->backend().url},
                    {"role", instance_role_name(i->role())},
                    {"weight", i->weight_},
                    {"group", i->group().empty() ? nlohmann::json() : nlohmann::json(i->group())},
                    {"healthy", i->probe_ok_ && !i->open_until_},
                    {"routable", up_locked(*i, now)},
                    {"probe_ok", i->probe_ok_},
                    {"breaker", !i->open_until_ ? "closed" : now < *i->open_until_ ? "open" : "half_open"},
                    {"draining", i->draining_},
                    {"routed", {{"prefill_requests", i->routed_.prefill_requests},
                                {"queued_prefill_tokens", i->routed_.queued_prefill_tokens},
                                {"decode_requests", i->routed_.running_sequences},
                                {"kv_tokens", i->routed_.kv_tokens}}},
                    {"reported", {{"running", i->reported_.running},
                                  {"waiting", i->reported_.waiting},
                                  {"kv_tokens", i->reported_.kv_tokens_used},
                                  {"max_sequences", i->reported_.max_sequences},
                                  {"kv_capacity_tokens", i->reported_.kv_capacity_tokens},
                                  {"requests_finished", i->reported_.requests_finished},
                                  {"prompt_tokens", i->reported_.prompt_tokens},
                                  {"generation_tokens", i->reported_.generation_tokens},
                                  {"kv_pulls", i->reported_.kv_pulls},
                                  {"kv_pulled_bytes", i->reported_.kv_pulled_bytes},
                                  {"started_unix_s", i->reported_.started_unix_s}}},
                    {"rates", i->rates_.json()},
                    {"restarts", i->restarts_},
                    {"prefill_model", {{"observations", i->prefill_model_.observations()},
                                       {"fixed_s", fit.fixed_s},
                                       {"per_token_s", fit.per_token_s},
                                       {"per_pair_s", fit.per_pair_s}}}});
  }
  return list;
}

void write_instance_metrics(PrometheusText& out, const Registry::Snapshot& s) {
  using Rows = std::vector<std::pair<PrometheusText::Labels, double>>;
  Rows up, draining, prefill_tokens, decode_requests, kv_tokens;
  for (const routing::InstanceView& v : s.views) {
    const PrometheusText::Labels labels{{"instance", v.id}, {"role", instance_role_name(v.role)}};
    up.push_back({labels, v.healthy ? 1.0 : 0.0});
    draining.push_back({labels, v.draining ? 1.0 : 0.0});
    prefill_tokens.push_back({labels, double(v.load.queued_prefill_tokens)});
    decode_requests.push_back({labels, double(v.load.running_sequences)});
    kv_tokens.push_back({labels, double(v.load.kv_tokens)});
  }
  out.samples("proxy_instance_up", "Whether the instance takes traffic (probe answered, breaker closed, its group up).", "gauge", up);
  if (!s.groups.empty()) {
    Rows group_up, group_ranks;
    std::map<std::string, int> ranks;
    for (const InstancePtr& i : s.instances)
      if (!i->group().empty()) ++ranks[i->group()];
    for (const auto& [group, is_up] : s.groups) {
      group_up.push_back({{{"group", group}}, is_up ? 1.0 : 0.0});
      group_ranks.push_back({{{"group", group}}, double(ranks[group])});
    }
    out.samples("proxy_group_up", "Whether every rank of the expert-parallel group is up (a rank down takes the group out).",
                "gauge", group_up);
    out.samples("proxy_group_ranks", "Instances (ranks) of the expert-parallel group.", "gauge", group_ranks);
  }
  out.samples("proxy_instance_draining", "Whether the instance is draining (takes nothing new).", "gauge", draining);
  out.samples("proxy_instance_queued_prefill_tokens", "Prompt tokens the proxy has routed there that are still prefilling.",
              "gauge", prefill_tokens);
  out.samples("proxy_instance_running_requests", "Requests running there (the larger of the proxy's count and the instance's).",
              "gauge", decode_requests);
  out.samples("proxy_instance_kv_tokens", "KV tokens held there (the larger of the proxy's estimate and the instance's report).",
              "gauge", kv_tokens);
}

LoadTicket::LoadTicket(Registry& registry, InstancePtr instance, const routing::InstanceLoad& load)
    : registry_(&registry), instance_(std::move(instance)), load_(load) {
  registry_->add_load(*instance_, load_, +1);
}

LoadTicket::~LoadTicket() { release(); }

LoadTicket::LoadTicket(LoadTicket&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)), instance_(std::move(other.instance_)), load_(other.load_) {}

LoadTicket& LoadTicket::operator=(LoadTicket&& other) noexcept {
  if (this != &other) {
    release();
    registry_ = std::exchange(other.registry_, nullptr);
    instance_ = std::move(other.instance_);
    load_ = other.load_;
  }
  return *this;
}

void LoadTicket::release() {
  if (registry_ == nullptr) return;
  registry_->add_load(*instance_, load_, -1);
  registry_ = nullptr;
}

}  // namespace moe::proxy
