#include "proxy/proxy_server.h"

#include <boost/asio/this_coro.hpp>

#include "proxy/stream_relay.h"

// The coroutines here keep temporaries out of co_await expressions (they are locals first):
// GCC 12 destroys some such temporaries twice.

namespace moe::proxy {

namespace {

http::Response json_response(const Json& body) {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return res;
}

bool answered_ok(const LegResult& r) { return r.response && r.response->status / 100 == 2; }

Json health_list(const std::vector<Backend>& backends, const std::vector<bool>& healthy) {
  Json list = Json::array();
  for (size_t i = 0; i < backends.size(); ++i) list.push_back(Json{{"url", backends[i].url}, {"healthy", bool(healthy[i])}});
  return list;
}

}  // namespace

ProxyServer::ProxyServer(ProxyConfig config) : config_(std::move(config)), backends_(config_.prefill, config_.decode) {}

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
  return r;
}

std::optional<ApiError> ProxyServer::check_api_key(const http::Request& req) const {
  if (config_.api_key.empty()) return std::nullopt;
  const std::string_view auth = req[http::Field::authorization];
  if (auth.empty()) return unauthorized("missing API key: send it as the header \"Authorization: Bearer <key>\"");
  if (auth != "Bearer " + config_.api_key) return unauthorized("incorrect API key provided");
  return std::nullopt;
}

asio::awaitable<void> ProxyServer::generate(http::Exchange& ex, Api api) {
  PdRequest request;
  request.arrived = http::Clock::now();
  std::optional<ApiError> error = check_api_key(ex.request());
  if (!error) {
    try {
      request.body = parse_client_body(ex.request().body());
    } catch (const ApiError& e) {
      error = e;
    }
  }
  if (error) {
    http::Response res = error_response(*error);
    co_await answer(ex, std::move(res));
    co_return;
  }
  request.api = api;
  request.target = std::string(ex.path());
  request.authorization = std::string(ex.request()[http::Field::authorization]);
  request.id = new_identity(api);
  if (wants_stream(request.body)) {
    StreamRelay relay(ex, request, metrics_, StreamLimits{config_.timeout, config_.release_timeout});
    co_await relay.run(backends_);
  } else {
    co_await collect(ex, request);
  }
}

asio::awaitable<void> ProxyServer::answer(http::Exchange& ex, http::Response res) {
  // Counted before it is sent: a client that has its answer may read /metrics at once.
  metrics_.count_request(int(res.result_int()));
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::collect(http::Exchange& ex, const PdRequest& request) {
  const auto executor = co_await asio::this_coro::executor;
  const Backend& p = backends_.next_prefill();
  http::HttpClient p_client(executor, p.base, client_options());
  http::HttpRequest p_request = leg_request(request, prefill_body(request.body));
  const std::optional<LegResult> p_result =
      co_await ex.unless_client_gone(fetch_leg(p_client, Leg::kPrefill, p, std::move(p_request)));
  if (!p_result) {
    metrics_.count_request(kClientClosed);
    co_return;
  }
  if (!answered_ok(*p_result)) {
    co_await answer_failure(ex, Leg::kPrefill, *p_result);
    co_return;
  }

  Json p_answer, handoff;
  std::string broken;
  try {
    p_answer = parse_answer(p_result->response->body);
    handoff = handoff_of(p_answer);
  } catch (const ProtocolError& e) {
    broken = protocol_failure(Leg::kPrefill, p, e.what());
  }
  if (!broken.empty()) {
    co_await answer_gateway(ex, Leg::kPrefill, broken);
    co_return;
  }
  if (handoff.is_null()) {
    make_own(p_answer, request.id);
    http::Response res = json_response(p_answer);
    co_await answer(ex, std::move(res));
    co_return;
  }

  const Backend& d = backends_.next_decode();
  http::HttpClient d_client(executor, d.base, client_options());
  http::HttpRequest d_request = leg_request(request, decode_body(request.body, handoff));
  const std::optional<LegResult> d_result = co_await ex.unless_client_gone(fetch_leg(d_client, Leg::kDecode, d, std::move(d_request)));
  // D answered nothing usable, so it will not take the KV blocks P holds for it.
  if (!d_result || !answered_ok(*d_result)) release_handoff(executor, p, handoff, request.authorization, config_.release_timeout);
  if (!d_result) {
    metrics_.count_request(kClientClosed);
    co_return;
  }
  if (!answered_ok(*d_result)) {
    co_await answer_failure(ex, Leg::kDecode, *d_result);
    co_return;
  }

  Json merged;
  try {
    merged = merge_answers(request.api, p_answer, parse_answer(d_result->response->body), request.id);
  } catch (const ProtocolError& e) {
    broken = protocol_failure(Leg::kDecode, d, e.what());
  }
  if (!broken.empty()) {
    co_await answer_gateway(ex, Leg::kDecode, broken);
    co_return;
  }
  http::Response res = json_response(merged);
  co_await answer(ex, std::move(res));
}

asio::awaitable<void> ProxyServer::answer_failure(http::Exchange& ex, Leg leg, const LegResult& result) {
  if (!result.response) {
    co_await answer_gateway(ex, leg, result.failure);
    co_return;
  }
  if (result.response->status >= 500) metrics_.count_leg_failure(leg);
  http::Response res = relayed(*result.response);
  co_await answer(ex, std::move(res));
}

asio::awaitable<void> ProxyServer::answer_gateway(http::Exchange& ex, Leg leg, const std::string& message) {
  metrics_.count_leg_failure(leg);
  http::Response res = error_response(bad_gateway(message));
  co_await answer(ex, std::move(res));
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
  const Backend& d = backends_.next_decode();
  const auto executor = co_await asio::this_coro::executor;
  http::HttpClient client(executor, d.base, client_options());
  const std::optional<LegResult> r = co_await ex.unless_client_gone(fetch_leg(client, Leg::kDecode, d, std::move(request)));
  if (!r) co_return;
  http::Response res = r->response ? relayed(*r->response) : error_response(bad_gateway(r->failure));
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::metrics(http::Exchange& ex) {
  http::Response res{http::Status::ok, 11};
  res.set(http::Field::content_type, "text/plain; version=0.0.4");
  res.body() = metrics_.prometheus_text();
  co_await ex.respond(std::move(res));
}

asio::awaitable<void> ProxyServer::health(http::Exchange& ex) {
  const Health h = co_await probe_health(backends_, config_.health_timeout);
  const bool ready = h.ready();
  http::Response res = json_response(Json{{"status", ready ? "ok" : "unavailable"},
                                          {"prefill", health_list(backends_.prefill(), h.prefill)},
                                          {"decode", health_list(backends_.decode(), h.decode)}});
  if (!ready) res.result(http::Status::service_unavailable);
  co_await ex.respond(std::move(res));
}

}  // namespace moe::proxy
