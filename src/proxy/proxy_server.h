#pragma once
// The front of a prefill/decode disaggregated deployment: an OpenAI-compatible server that
// runs each completion in two legs, the prompt at a prefill instance (P), which hands its
// KV cache off, then the rest at a decode instance (D), and answers the client as one
// server would (merge.h and stream_events.h for the protocol).
//
// Routes: POST /v1/completions and /v1/chat/completions, GET /v1/models (a decode
// instance's), GET /health (every instance's), GET /metrics (the proxy's own).
#include <chrono>
#include <string>
#include <vector>

#include "http/router.h"
#include "proxy/backends.h"
#include "proxy/errors.h"
#include "proxy/legs.h"
#include "proxy/proxy_metrics.h"

namespace moe::proxy {

struct ProxyConfig {
  std::vector<std::string> prefill, decode;  // http://HOST:PORT of each instance
  std::string api_key;                       // when set, /v1/* need "Authorization: Bearer KEY"
  // An instance that sends nothing for this long (connecting, or between reads) fails its leg.
  std::chrono::milliseconds timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds health_timeout{std::chrono::seconds(2)};   // each /health probe
  std::chrono::milliseconds release_timeout{std::chrono::seconds(2)};  // a lease release
};

class ProxyServer {
 public:
  // Throws moe::Error for a missing or malformed instance URL.
  explicit ProxyServer(ProxyConfig config);

  // The routes; they use this object, which must outlive the HttpServer serving them.
  http::Router router();
  // The HTTP layer's own errors (404, 405, 408, 413, ...) in the OpenAI shape.
  static http::Response http_error(http::Status status, const std::string& message);

 private:
  asio::awaitable<void> generate(http::Exchange& ex, Api api);
  // Non-streamed: both legs whole, then one merged answer.
  asio::awaitable<void> collect(http::Exchange& ex, const PdRequest& request);
  // A completion request's whole answer, counted by its status.
  asio::awaitable<void> answer(http::Exchange& ex, http::Response res);
  // Answers the client for a leg that gave no usable answer: the instance's own error
  // answer, or a 502 naming the leg and the instance.
  asio::awaitable<void> answer_failure(http::Exchange& ex, Leg leg, const LegResult& result);
  asio::awaitable<void> answer_gateway(http::Exchange& ex, Leg leg, const std::string& message);
  asio::awaitable<void> models(http::Exchange& ex);
  asio::awaitable<void> health(http::Exchange& ex);
  asio::awaitable<void> metrics(http::Exchange& ex);
  std::optional<ApiError> check_api_key(const http::Request& req) const;
  http::HttpClientOptions client_options() const { return http::HttpClientOptions{config_.timeout}; }

  ProxyConfig config_;
  Backends backends_;
  ProxyMetrics metrics_;
};

}  // namespace moe::proxy
