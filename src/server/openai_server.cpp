#include "server/openai_server.h"

#include "core/npy.h"
#include "dashboard/dashboard_page.h"
#include "engine/metrics.h"
#include "server/json_fields.h"
#include "server/api_error.h"
#include "server/expert_state.h"
#include "tokenizer/stream_decoder.h"

namespace moe::server {

namespace {

http::Response json_response(const Json& body) {
  return server::json_response(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

asio::awaitable<void> send(http::Exchange& ex, http::Response res) { co_await ex.respond(std::move(res)); }

http::Response dashboard_page_response() {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "text/html; charset=utf-8");
  res.set(http::Field::cache_control, "no-store");
  res.body() = std::string(dashboard::dashboard_page());
  return res;
}

}  // namespace

OpenAiServer::OpenAiServer(AsyncEngine& engine, ApiConfig config, disagg::KvAgent* agent)
    : engine_(engine), config_(std::move(config)), agent_(agent), prompter_(engine.tokenizer(), config_.chat_template),
      created_(unix_now()),
      started_unix_s_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

http::Response OpenAiServer::http_error(http::Status status, const std::string& message) {
  return error_response(server::http_error(status, message));
}

http::Router OpenAiServer::router() {
  http::Router r;
  using V = http::Verb;
  r.add(V::post, "/v1/completions", [this](http::Exchange& ex) { return generate_served(ex, Api::kCompletion); });
  r.add(V::post, "/v1/chat/completions", [this](http::Exchange& ex) { return generate_served(ex, Api::kChat); });
  r.add(V::get, "/v1/models", [this](http::Exchange& ex) { return send(ex, models(ex.request())); });
  r.add(V::get, "/health", [this](http::Exchange& ex) { return send(ex, health()); });
  r.add(V::get, "/internal/kv/info", [this](http::Exchange& ex) { return send(ex, kv_info()); });
  r.add(V::post, "/internal/kv/release", [this](http::Exchange& ex) { return release_lease(ex); });
  r.add(V::get, "/internal/kv/blocks", [this](http::Exchange& ex) { return kv_blocks(ex); });
  r.add(V::get, "/metrics", [this](http::Exchange& ex) { return send(ex, metrics()); });
  r.add(V::get, "/dashboard", [](http::Exchange& ex) { return send(ex, dashboard_page_response()); });
  r.add(V::get, "/dashboard/state", [this](http::Exchange& ex) { return send(ex, dashboard_state()); });
  if (config_.expert_parallel) {
    r.add(V::get, "/admin/expert-trace", [this](http::Exchange& ex) { return send(ex, expert_trace(ex.request())); });
    r.add(V::get, "/admin/expert-state", [this](http::Exchange& ex) { return send(ex, expert_state(ex.request())); });
  }
  r.add(V::post, "/tokenize", [this](http::Exchange& ex) { return send(ex, tokenize(ex.request())); });
  r.add(V::post, "/detokenize", [this](http::Exchange& ex) { return send(ex, detokenize(ex.request())); });
  return r;
}

void OpenAiServer::check_api_key(const http::Request& req) const {
  if (config_.api_key.empty()) return;
  const std::string_view auth = req[http::Field::authorization];
  if (auth.empty()) throw unauthorized("missing API key: send it as the header \"Authorization: Bearer <key>\"");
  if (auth != "Bearer " + config_.api_key) throw unauthorized("incorrect API key provided");
}

void OpenAiServer::check_model(const std::string& model) const {
  if (model != config_.served_model_name) throw model_not_found(model);
}

http::Response OpenAiServer::models(const http::Request& req) const {
  try {
    check_api_key(req);
  } catch (const ApiError& e) {
    return error_response(e);
  }
  const Json card{{"id", config_.served_model_name},
                  {"object", "model"},
                  {"created", created_},
                  {"owned_by", "moengine"},
                  {"root", config_.model_path},
                  {"parent", nullptr},
                  {"max_model_len", context_limit(engine_.limits())},
                  {"engine_id", config_.engine_id},
                  {"role", disagg::role_name(config_.role)}};
  return json_response(Json{{"object", "list"}, {"data", Json::array({card})}});
}

http::Response OpenAiServer::health() const { return json_response(health_json()); }

Json OpenAiServer::health_json() const {
  // Capacity and load, for a router in front: requests it takes before answering 429, and
  // KV positions in all and in use.
  const EngineMetrics m = engine_.metrics();
  const AsyncEngineConfig& c = engine_.config();
  const int64_t block = c.engine.block_size;
  uint64_t finished = 0;
  for (const uint64_t n : m.request_success_total) finished += n;
  const disagg::KvAgent::PullTotals pulled = agent_ ? agent_->pull_totals() : disagg::KvAgent::PullTotals{};
  // Counters since the start, from which a router or a dashboard takes rates.
  const Json totals{{"requests_finished", finished},
                    {"prompt_tokens", m.prompt_tokens_total},
                    {"generation_tokens", m.generation_tokens_total},
                    {"kv_pulls", pulled.pulls},
                    {"kv_pulled_bytes", pulled.bytes}};
  return Json{{"status", "ok"},
            {"engine_id", config_.engine_id},
            {"role", disagg::role_name(config_.role)},
            {"capacity", {{"max_sequences", int64_t(c.engine.scheduler.max_num_seqs) + int64_t(c.max_waiting)},
                          {"kv_tokens", m.kv_blocks_total * block},
                          {"kv_cache_dtype", m.kv_cache_dtype},
                          {"kv_bytes_per_token", m.kv_bytes_per_token}}},
            {"load", {{"running", m.num_requests_running},
                      {"waiting", m.num_requests_waiting},
                      {"kv_tokens", m.kv_blocks_used * block}}},
            {"totals", totals},
            {"started_unix_s", started_unix_s_},
            {"kv_events", config_.kv_events_endpoint.empty() ? Json() : Json(config_.kv_events_endpoint)}};
}

http::Response OpenAiServer::dashboard_state() {
  const Json h = health_json();
  const Json& totals = h["totals"];
  std::vector<uint64_t> counted;
  for (const std::string& k : dashboard::health_rate_names()) counted.push_back(totals[k].get<uint64_t>());
  const std::string group = config_.expert_parallel ? "this group" : "";
  Json reported = h["load"];
  reported["max_sequences"] = h["capacity"]["max_sequences"];
  reported["kv_capacity_tokens"] = h["capacity"]["kv_tokens"];
  reported.update(totals);
  reported["started_unix_s"] = started_unix_s_;
  const Json self{{"name", config_.engine_id},
                  {"url", nullptr},
                  {"role", disagg::role_name(config_.role)},
                  {"group", group.empty() ? Json() : Json(group)},
                  {"healthy", true},
                  {"routable", true},
                  {"breaker", nullptr},
                  {"draining", false},
                  {"reported", std::move(reported)},
                  {"rates", served_.rates(std::move(counted))},
                  {"restarts", nullptr}};
  Json experts = Json::object();
  if (config_.expert_parallel) experts[group] = {{"rank", config_.engine_id}, {"state", expert_state_json(*config_.expert_parallel)}};
  http::Response res = json_response(Json{{"instances", Json::array({self})},
                                          {"expert_groups", std::move(experts)},
                                          {"queued_requests", h["load"]["waiting"]},
                                          {"window", served_.window_json()}});
  res.set(http::Field::cache_control, "no-store");
  return res;
}

http::Response OpenAiServer::kv_info() const {
  if (!agent_) return error_response(wrong_role("this instance takes no part in prefill/decode hand-offs (no KV transport)"));
  return json_response(Json(agent_->info()));
}

namespace {

http::Response lease_answer(LeaseRelease r, int64_t id) {
  switch (r) {
    case LeaseRelease::kReleased:
      return json_response(Json{{"status", "released"}, {"remote_request_id", std::to_string(id)}});
    case LeaseRelease::kExpired:
      return error_response(lease_expired(fmt::format("the lease on request {} expired before it was released", id)));
    case LeaseRelease::kUnknown:
      break;
  }
  return error_response(lease_unknown(fmt::format("no lease is held for request {}", id)));
}

}  // namespace

asio::awaitable<void> OpenAiServer::release_lease(http::Exchange& ex) {
  std::optional<ApiError> error;
  int64_t id = 0;
  try {
    const Json body = parse_json_body(ex.request().body());
    const FieldReader f(body, "");
    const std::string rid = f.required_string("remote_request_id");
    size_t used = 0;
    try {
      id = std::stoll(rid, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != rid.size()) throw lease_unknown(fmt::format("no lease is named '{}'", rid));
  } catch (const ApiError& e) {
    error = e;
  }
  if (error) {
    co_await ex.respond(error_response(*error));
    co_return;
  }
  co_await ex.respond(lease_answer(engine_.release_lease(id), id));
}

http::Response OpenAiServer::expert_trace(const http::Request& req) const {
  try {
    check_api_key(req);
  } catch (const ApiError& e) {
    return error_response(e);
  }
  const placement::Trace t = config_.expert_parallel->load().window();
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "application/octet-stream");
  res.body() = npy_f32_bytes({t.steps, t.layers, t.experts}, t.load.data());
  return res;
}

http::Response OpenAiServer::expert_state(const http::Request& req) const {
  try {
    check_api_key(req);
  } catch (const ApiError& e) {
    return error_response(e);
  }
  return json_response(expert_state_json(*config_.expert_parallel));
}

http::Response OpenAiServer::metrics() const {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "text/plain; version=0.0.4");
  res.body() = prometheus_text(engine_.metrics(), config_.served_model_name);
  if (agent_) {
    PrometheusText pd(config_.served_model_name);
    agent_->write_metrics(pd);
    res.body() += pd.take();
  }
  return res;
}

http::Response OpenAiServer::tokenize(const http::Request& req) const {
  try {
    const TokenizeRequest t = parse_tokenize_request(parse_json_body(req.body()));
    if (t.model) check_model(*t.model);
    const std::vector<int32_t> ids = t.chat ? prompter_.encode_chat(*t.chat, t.add_special_tokens)
                                            : prompter_.encode_text(*t.prompt, t.add_special_tokens);
    return json_response(Json{{"count", ids.size()}, {"max_model_len", context_limit(engine_.limits())}, {"tokens", ids}});
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

http::Response OpenAiServer::detokenize(const http::Request& req) const {
  try {
    const DetokenizeRequest d = parse_detokenize_request(parse_json_body(req.body()));
    if (d.model) check_model(*d.model);
    const Tokenizer& tok = engine_.tokenizer();
    const std::vector<int32_t> ids = check_token_ids(d.tokens, tok.n_vocab(), "tokens");
    return json_response(Json{{"prompt", utf8_sanitize(tok.decode(ids))}});
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

}  // namespace moe::server
