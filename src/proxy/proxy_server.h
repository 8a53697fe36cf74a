#pragma once
// The front of a prefill/decode disaggregated deployment (any number of P, D and unified
// instances): an OpenAI-compatible server that runs each completion in two legs, the
// prompt at a prefill instance (P), which hands its KV cache off, then the rest at a
// decode instance (D), and answers the client as one server would (merge.h and
// stream_events.h for the protocol). Which instance takes each leg is the scheduler's
// choice; a leg whose instance fails before the client saw any of it runs again elsewhere.
//
// Routes: POST /v1/completions and /v1/chat/completions, GET /v1/models (a decode-capable
// instance's), GET /health (the registry's view of every instance), GET /metrics (the
// proxy's own), GET /dashboard (a live page) and GET /dashboard/state (its JSON), and the
// admin API under /admin (docs/proxy.md).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "http/router.h"
#include "proxy/dispatch.h"
#include "proxy/errors.h"
#include "proxy/health_monitor.h"
#include "proxy/legs.h"
#include "proxy/prefix_index.h"
#include "proxy/prompt_tokens.h"
#include "proxy/proxy_metrics.h"
#include "proxy/registry.h"
#include "proxy/request_trace.h"
#include "proxy/scheduler.h"

namespace moe::proxy {

struct ProxyConfig {
  std::vector<InstanceSpec> instances;
  std::string api_key;    // when set, /v1/* need "Authorization: Bearer KEY"
  std::string admin_key;  // when set, /admin/* need "Authorization: Bearer KEY"; else they are off
  SchedulerConfig scheduler;
  DispatchConfig dispatch;
  BreakerConfig breaker;
  HealthMonitorConfig health;
  // An instance that sends nothing for this long (connecting, or between reads) fails its leg.
  std::chrono::milliseconds timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds release_timeout{std::chrono::seconds(2)};  // a lease release
  std::string access_log;  // a JSON line per request appended here ("-": stdout); none when empty
  // The model's tokenizer (a GGUF file, tokenizer.json or checkpoint folder) and a chat
  // template text replacing its own: prompts are then measured exactly. Without one they
  // are estimated from the body (request_estimate.h).
  std::string tokenizer;
  std::string chat_template;
  dashboard::SloJudge slo;  // the dashboard's goodput
};

class ProxyServer {
 public:
  // Throws moe::Error for a malformed instance URL or a duplicate name. Probes every
  // instance once before it returns.
  explicit ProxyServer(ProxyConfig config);

  // The routes; they use this object, which must outlive the HttpServer serving them.
  http::Router router();
  // The HTTP layer's own errors (404, 405, 408, 413, ...) in the OpenAI shape.
  static http::Response http_error(http::Status status, const std::string& message);

  Registry& registry() { return registry_; }

 private:
  asio::awaitable<void> generate(http::Exchange& ex, Api api);
  // Non-streamed: each leg whole, then one merged answer.
  asio::awaitable<void> collect(http::Exchange& ex, const PdRequest& request, RequestTrace& trace);
  // One leg's whole answer, tried at instances one after another (see StreamRelay for the
  // rules). `handoff` is null for the prefill leg. Returns nullopt when the client left,
  // after answering it when the leg could not be served.
  struct Served {
    InstancePtr instance;
    LegResult result;
    bool whole = false;  // the prefill leg ran the whole request at a unified instance
  };
  asio::awaitable<std::optional<Served>> collect_leg(http::Exchange& ex, const PdRequest& request, Leg leg,
                                                     const Json& handoff, RequestTrace& trace);
  // A completion request's whole answer, counted by its status.
  asio::awaitable<void> answer(http::Exchange& ex, http::Response res, RequestTrace& trace);
  // Answers the client for a leg that gave no usable answer: the instance's own error
  // answer, or a 502 naming the leg and the instance.
  asio::awaitable<void> answer_failure(http::Exchange& ex, const LegResult& result, RequestTrace& trace);
  asio::awaitable<void> answer_error(http::Exchange& ex, const ApiError& e, RequestTrace& trace);
  // What the health monitor tells the prefix index.
  ProbeListener probe_listener();
  // The request has ended: its phases into the metrics, its line into the access log.
  void finish(const RequestTrace& trace);
  asio::awaitable<void> models(http::Exchange& ex);
  asio::awaitable<void> health(http::Exchange& ex);
  asio::awaitable<void> metrics(http::Exchange& ex);
  asio::awaitable<void> dashboard(http::Exchange& ex);
  asio::awaitable<void> dashboard_state(http::Exchange& ex);
  asio::awaitable<void> admin(http::Exchange& ex, const std::string& action);
  struct AdminOutcome {
    http::Response res;
    InstancePtr added;  // to probe before answering
  };
  AdminOutcome admin_action(const http::Request& req, const std::string& action);
  std::optional<ApiError> check_api_key(const http::Request& req) const;
  std::optional<ApiError> check_admin_key(const http::Request& req) const;

  ProxyConfig config_;
  Registry registry_;
  Scheduler scheduler_;
  PrefixIndex prefix_index_;
  Dispatch dispatch_;  // tells the prefix index of each prompt it routes
  ProxyMetrics metrics_;
  std::unique_ptr<AccessLog> access_log_;
  std::unique_ptr<PromptTokenizer> tokenizer_;
  std::unique_ptr<HealthMonitor> monitor_;  // last: it probes the registry from its thread
};

}  // namespace moe::proxy
