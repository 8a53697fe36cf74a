#include "proxy/proxy_server.h"

#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "dashboard/dashboard_page.h"
#include "proxy/expert_views.h"
#include "proxy/request_estimate.h"
#include "proxy/stream_relay.h"

// The coroutines here keep temporaries out of co_await expressions (they are locals first):
// GCC 12 destroys some such temporaries twice.

namespace moe::proxy {

namespace {

http::Response json_response(const Json& body, http::Status status = http::Status::ok) {
  http::Response res{status, 11};
  res.set(http::Field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return res;
}

bool answered_ok(const LegResult& r) { return r.response && r.response->status / 100 == 2; }

std::optional<std::string> bearer(const http::Request& req) {
  const std::string_view auth = req[http::Field::authorization];
  if (!auth.starts_with("Bearer ")) return std::nullopt;
  return std::string(auth.substr(7));
}

}  // namespace

ProxyServer::ProxyServer(ProxyConfig config)
    : config_(std::move(config)),
      registry_(config_.instances, config_.breaker, http::HttpClientOptions{config_.timeout}),
      scheduler_(registry_, config_.scheduler),
      dispatch_(registry_, scheduler_, config_.dispatch, &prefix_index_),
      metrics_(config_.slo) {
  if (!config_.access_log.empty()) access_log_ = std::make_unique<AccessLog>(config_.access_log);
  if (!config_.tokenizer.empty()) tokenizer_ = std::make_unique<PromptTokenizer>(config_.tokenizer, config_.chat_template);
  monitor_ = std::make_unique<HealthMonitor>(registry_, config_.health, probe_listener());
}

ProbeListener ProxyServer::probe_listener() {
  return [this](const Instance& instance, const HealthReport& report) { prefix_index_.on_probe(instance, report); };
}

void ProxyServer::finish(const RequestTrace& trace) {
  metrics_.observe_phases(trace);
  if (access_log_) access_log_->write(trace.line());
}

http::Response ProxyServer::http_error(http::Status status, const std::string& message) {
  return error_response(http::http_error(status, message));
}

http::Router ProxyServer::router() {
  http::Router r;
  using V = http::Verb;
  r.add(V::post, "/v1/completions", [this](http::Exchange& ex) { return generate(ex, Api::kCompletion); });
  r.add(V::post, "/v1/chat/completions", [this](http::Exchange& ex) { return generate(ex, Api::kChat); });
  r.add(V::get, "/v1/models", [this](http::Exchange& ex) { return models(ex); });
  r.add(V::get, "/health", [this](http::Exchange& ex) { return health(ex); });
  r.add(V::get, "/metrics", [this](http::Exchange& ex) { return metrics(ex); });
  r.add(V::get, "/dashboard", [this](http::Exchange& ex) { return dashboard(ex); });
  r.add(V::get, "/dashboard/state", [this](http::Exchange& ex) { return dashboard_state(ex); });
  r.add(V::get, "/admin/instances", [this](http::Exchange& ex) { return admin(ex, "list"); });
  for (const char* action : {"add", "drain", "resume", "remove"}) {
    r.add(V::post, fmt::format("/admin/instances/{}", action), [this, action](http::Exchange& ex) { return admin(ex, action); });
  }
  return r;
}

std::optional<ApiError> ProxyServer::check_api_key(const http::Request& req) const {
  if (config_.api_key.empty()) return std::nullopt;
  const std::string_view auth = req[http::Field::authorization];
  if (auth.empty()) return unauthorized("missing API key: send it as the header \"Authorization: Bearer <key>\"");
  if (auth != "Bearer " + config_.api_key) return unauthorized("incorrect API key provided");
  return std::nullopt;
}

std::optional<ApiError> ProxyServer::check_admin_key(const http::Request& req) const {
  if (config_.admin_key.empty()) return admin_forbidden("the admin API is off: start the proxy with --admin-key");
  if (bearer(req) != config_.admin_key) {
    return admin_forbidden("missing or incorrect admin key: send it as the header \"Authorization: Bearer <admin key>\"");
  }
  return std::nullopt;
}

asio::awaitable<void> ProxyServer::generate(http::Exchange& ex, Api api) {
  PdRequest request;
  request.arrived = http::Clock::now();
  request.id = new_identity(api);
  std::optional<ApiError> error = check_api_key(ex.request());
  if (!error) {
    try {
      request.body = parse_client_body(ex.request().body());
    } catch (const ApiError& e) {
      error = e;
    }
  }
  RequestTrace trace(request.id.id, api, !error && wants_stream(request.body), request.arrived);
  if (error) {
    co_await answer_error(ex, *error, trace);
  } else {
    request.api = api;
    request.target = std::string(ex.path());
    request.authorization = std::string(ex.request()[http::Field::authorization]);
    request.routing = routing_request(api, request.body, request.id.id, routing_seconds(request.arrived));
    if (tokenizer_) {
      request.prompt_ids = tokenizer_->tokens(api, request.body);
      if (request.prompt_ids) {
        request.routing.prompt_tokens = int64_t(request.prompt_ids->size());
        request.matched_prefix = prefix_index_.matched_tokens(*request.prompt_ids);
      }
      trace.mark("tokenized", {{"prompt_tokens", request.routing.prompt_tokens},
                               {"exact", request.prompt_ids.has_value()},
                               {"cached", Json(request.matched_prefix)}});
    }
    if (wants_stream(request.body)) {
      StreamRelay relay(ex, request, metrics_, dispatch_, StreamLimits{config_.timeout, config_.release_timeout}, trace);
      co_await relay.run();
    } else {
      co_await collect(ex, request, trace);
    }
  }
  finish(trace);
}

asio::awaitable<void> ProxyServer::answer(http::Exchange& ex, http::Response res, RequestTrace& trace) {
  // Counted before it is sent: a client that has its answer may read /metrics at once.
  metrics_.count_request(int(res.result_int()));
  trace.set_status(int(res.result_int()));
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::answer_error(http::Exchange& ex, const ApiError& e, RequestTrace& trace) {
  http::Response res = error_response(e);
  co_await answer(ex, std::move(res), trace);
}

asio::awaitable<std::optional<ProxyServer::Served>> ProxyServer::collect_leg(http::Exchange& ex, const PdRequest& request,
                                                                             Leg leg, const Json& handoff, RequestTrace& trace) {
  std::vector<std::string> tried;
  std::optional<Served> served, failed;
  for (int attempt = 1; !served; ++attempt) {
    const std::optional<Picked> picked = co_await ex.unless_client_gone(dispatch_.pick(leg, request, tried));
    if (!picked) break;
    if (failed && !picked->route.instance) {
      served = std::move(failed);
      break;
    }
    if (picked->error) {
      co_await answer_error(ex, *picked->error, trace);
      break;
    }
    const InstancePtr instance = picked->route.instance;
    const bool whole = leg == Leg::kPrefill && picked->route.decision.whole_request;
    trace.mark("routed", {{"leg", whole ? "whole" : leg_name(leg)}, {"instance", instance->name()}, {"reason", picked->route.decision.reason}});
    const bool alone = leg == Leg::kPrefill && dispatch_.alone(*instance);
    const Json body = leg == Leg::kDecode ? decode_body(request.body, handoff) : whole ? request.body : prefill_body(request.body);
    http::HttpRequest leg_req = leg_request(request, body);
    const http::Clock::time_point started = http::Clock::now();
    std::optional<LegResult> result =
        co_await ex.unless_client_gone(fetch_leg(leg, instance->backend(), std::move(leg_req)));
    if (!result) break;
    // A 2xx that is not the protocol's is caught by the caller, which names the instance.
    const bool fault = instance_fault(*result);
    dispatch_.report(*instance, fault, !result->response);
    if (fault) {
      metrics_.count_leg_failure(leg);
      if (attempt < dispatch_.config().max_attempts) {
        trace.mark("retry", {{"leg", leg_name(leg)}, {"instance", instance->name()}});
        tried.push_back(instance->name());
        failed = Served{instance, std::move(*result), whole};
        continue;
      }
    }
    if (alone && answered_ok(*result) && !whole) {
      const Json answer = Json::parse(result->response->body, nullptr, false);
      const Json* usage = member(answer, "usage");
      const Json* prompt = usage ? member(*usage, "prompt_tokens") : nullptr;
      const Json* details = usage ? member(*usage, "prompt_tokens_details") : nullptr;
      const Json* cached = details ? member(*details, "cached_tokens") : nullptr;
      if (prompt && prompt->is_number_integer()) {
        const int64_t n_cached = cached && cached->is_number_integer() ? cached->get<int64_t>() : 0;
        dispatch_.registry().observe_prefill(*instance, prompt->get<int64_t>() - n_cached, n_cached,
                                             std::chrono::duration<double>(http::Clock::now() - started).count());
      }
    }
    if (leg == Leg::kPrefill) trace.prefill_done();
    else trace.decode_started();
    served = Served{instance, std::move(*result), whole};
  }
  if (!served && !ex.responded()) metrics_.count_request(kClientClosed);
  co_return served;
}

asio::awaitable<void> ProxyServer::collect(http::Exchange& ex, const PdRequest& request, RequestTrace& trace) {
  const std::optional<Served> p = co_await collect_leg(ex, request, Leg::kPrefill, Json(), trace);
  if (!p) co_return;
  if (!answered_ok(p->result)) {
    co_await answer_failure(ex, p->result, trace);
    co_return;
  }
  const Backend& pb = p->instance->backend();
  Json p_answer, handoff;
  std::string broken;
  try {
    p_answer = parse_answer(p->result.response->body);
    if (!p->whole) handoff = handoff_of(p_answer);
  } catch (const ProtocolError& e) {
    broken = protocol_failure(Leg::kPrefill, pb, e.what());
  }
  if (!broken.empty()) {
    metrics_.count_leg_failure(Leg::kPrefill);
    const ApiError e = bad_gateway(broken);
    co_await answer_error(ex, e, trace);
    co_return;
  }
  if (handoff.is_null()) {
    make_own(p_answer, request.id);
    trace.note_usage(p_answer);
    http::Response res = json_response(p_answer);
    co_await answer(ex, std::move(res), trace);
    co_return;
  }

  const auto executor = co_await asio::this_coro::executor;
  const std::optional<Served> d = co_await collect_leg(ex, request, Leg::kDecode, handoff, trace);
  // D answered nothing usable, so it will not take the KV blocks P holds for it.
  if (!d || !answered_ok(d->result)) release_handoff(executor, pb, handoff, request.authorization, config_.release_timeout);
  if (!d) co_return;
  if (!answered_ok(d->result)) {
    co_await answer_failure(ex, d->result, trace);
    co_return;
  }
  Json merged;
  try {
    merged = merge_answers(request.api, p_answer, parse_answer(d->result.response->body), request.id);
  } catch (const ProtocolError& e) {
    broken = protocol_failure(Leg::kDecode, d->instance->backend(), e.what());
  }
  if (!broken.empty()) {
    metrics_.count_leg_failure(Leg::kDecode);
    const ApiError e = bad_gateway(broken);
    co_await answer_error(ex, e, trace);
    co_return;
  }
  trace.note_usage(merged);
  http::Response res = json_response(merged);
  co_await answer(ex, std::move(res), trace);
}

asio::awaitable<void> ProxyServer::answer_failure(http::Exchange& ex, const LegResult& result, RequestTrace& trace) {
  if (!result.response) {
    const ApiError e = bad_gateway(result.failure);
    co_await answer_error(ex, e, trace);
    co_return;
  }
  http::Response res = relayed(*result.response);
  co_await answer(ex, std::move(res), trace);
}

asio::awaitable<void> ProxyServer::models(http::Exchange& ex) {
  if (const std::optional<ApiError> error = check_api_key(ex.request())) {
    http::Response res = error_response(*error);
    co_await ex.respond(std::move(res));
    co_return;
  }
  http::HttpRequest request;
  request.method = "GET";
  request.target = "/v1/models";
  const std::string_view auth = ex.request()[http::Field::authorization];
  if (!auth.empty()) request.headers.emplace_back("Authorization", std::string(auth));
  const Route route = scheduler_.route(Leg::kDecode, routing::RoutingRequest{"models", 1, 1, 0}, {});
  if (!route.instance) {
    http::Response res = error_response(no_instance("no decode instance is up: " + route.decision.detail));
    co_await ex.respond(std::move(res));
    co_return;
  }
  const Backend& d = route.instance->backend();
  const std::optional<LegResult> r = co_await ex.unless_client_gone(fetch_leg(Leg::kDecode, d, std::move(request)));
  if (!r) co_return;
  http::Response res = r->response ? relayed(*r->response) : error_response(bad_gateway(r->failure));
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::metrics(http::Exchange& ex) {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "text/plain; version=0.0.4");
  PrometheusText out("");
  scheduler_.write_metrics(out);
  write_instance_metrics(out, registry_.snapshot(Clock::now()));
  out.gauge("proxy_queued_requests", "Requests waiting for an instance to take them.", double(dispatch_.queued()));
  res.body() = metrics_.prometheus_text() + out.take();
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::dashboard(http::Exchange& ex) {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "text/html; charset=utf-8");
  res.set(http::Field::cache_control, "no-store");
  res.body() = std::string(dashboard::dashboard_page());
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::dashboard_state(http::Exchange& ex) {
  const Clock::time_point now = Clock::now();
  const Registry::Snapshot snapshot = registry_.snapshot(now);
  Json groups = Json::object();
  for (const auto& [name, up] : snapshot.groups) groups[name] = up;
  constexpr std::chrono::milliseconds kExpertStateTimeout{500};
  Json experts = co_await fetch_expert_views(registry_.all(), snapshot.groups, kExpertStateTimeout);
  http::Response res = json_response(Json{{"instances", registry_.describe(now)},
                                          {"groups", std::move(groups)},
                                          {"expert_groups", std::move(experts)},
                                          {"queued_requests", dispatch_.queued()},
                                          {"routing", scheduler_.decisions_json()},
                                          {"window", metrics_.window_json()}});
  res.set(http::Field::cache_control, "no-store");
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::health(http::Exchange& ex) {
  const Registry::Snapshot s = registry_.snapshot(Clock::now());
  bool prefill = false, decode = false;
  for (const routing::InstanceView& v : s.views) {
    if (!v.healthy || v.draining) continue;
    prefill |= v.role != InstanceRole::decode;
    decode |= v.role != InstanceRole::prefill;
  }
  const bool ready = prefill && decode;
  Json instances = registry_.describe(Clock::now());
  for (Json& i : instances) i["kv_events"] = prefix_index_.describe(i["name"].get<std::string>());
  http::Response res = json_response(Json{{"status", ready ? "ok" : "unavailable"}, {"instances", std::move(instances)}},
                                     ready ? http::Status::ok : http::Status::service_unavailable);
  co_await ex.respond(std::move(res));
}

// Not a coroutine: GCC 12 rejects these fmt calls and catch clauses inside one.
ProxyServer::AdminOutcome ProxyServer::admin_action(const http::Request& req, const std::string& action) {
  AdminOutcome out;
  std::optional<ApiError> error = check_admin_key(req);
  if (!error && action == "list") out.res = json_response(Json{{"instances", registry_.describe(Clock::now())}});
  if (!error && action != "list") {
    try {
      const Json body = Json::parse(req.body());
      if (action == "add") {
        InstanceSpec spec;
        spec.url = body.at("url").get<std::string>();
        spec.name = body.value("name", std::string());
        spec.role = parse_instance_role(body.value("role", std::string("both")));
        spec.weight = body.value("weight", 1.0);
        out.added = registry_.add(std::move(spec));
        out.res = json_response(Json{{"added", out.added->name()}}, http::Status::created);
      } else {
        const Json* name = member(body, "name");
        if (!name || !name->is_string()) throw bad_admin_request("the body must name the instance: {\"name\": \"...\"}");
        const std::string n = name->get<std::string>();
        const bool found = action == "remove" ? registry_.remove(n) : registry_.set_draining(n, action == "drain");
        if (!found) throw unknown_instance(fmt::format("no instance is named {}", n));
        out.res = json_response(Json{{"instance", n}, {"action", action}});
      }
    } catch (const ApiError& e) {
      error = e;
    } catch (const Json::exception& e) {
      error = bad_admin_request(fmt::format("bad admin request: {}", e.what()));
    } catch (const Error& e) {
      error = bad_admin_request(e.what());
    }
  }
  if (error) out.res = error_response(*error);
  return out;
}

asio::awaitable<void> ProxyServer::admin(http::Exchange& ex, const std::string& action) {
  AdminOutcome out = admin_action(ex.request(), action);
  // A new instance is probed before the answer: routing can use it from the next request.
  if (out.added) {
    std::vector<InstancePtr> probed{out.added};
    const ProbeListener listener = probe_listener();
    co_await probe_all(registry_, std::move(probed), config_.health.timeout, listener);
  }
  co_await ex.respond(std::move(out.res));
}

}  // namespace moe::proxy
