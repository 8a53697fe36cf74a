#pragma once
// The OpenAI-compatible API over one AsyncEngine: the routes, API-key checks, and the
// hand-off between the engine thread and the I/O threads.
//
// Threads: handlers run on the HTTP server's I/O threads; they tokenize, submit to the
// engine and cancel, which AsyncEngine allows from any thread. The engine thread only
// pushes each RequestOutput into the request's Mailbox, which wakes the handler on its own
// connection's executor; it never waits on a socket.
#include <string>

#include "disagg/kv_agent.h"
#include "engine/async_engine.h"
#include "http/router.h"
#include "moe/expert_parallel.h"
#include "server/prompts.h"
#include "server/protocol.h"
#include "server/responses.h"
#include "server/served_requests.h"

namespace moe::server {

namespace asio = http::asio;

struct ApiConfig {
  std::string served_model_name;  // the name clients send as "model"
  std::string model_path;         // reported as the model's "root"
  std::string api_key;            // empty: no key needed
  std::string chat_template;      // Jinja source replacing the model's own; empty: the model's
  disagg::Role role = disagg::Role::kBoth;
  std::string engine_id;          // in /health and /v1/models
  std::string kv_events_endpoint;  // in /health, for a router to subscribe to; empty: none
  // An expert-parallel rank: GET /admin/expert-trace serves its load window and
  // GET /admin/expert-state the dashboard's view of the group (only its thread-safe parts
  // are read: load() and view()).
  const ExpertParallel* expert_parallel = nullptr;
};

class OpenAiServer {
 public:
  // The engine (and the agent, when given) must outlive the server and every request it is
  // serving. Without an agent the instance takes no part in prefill/decode hand-offs.
  OpenAiServer(AsyncEngine& engine, ApiConfig config, disagg::KvAgent* agent = nullptr);

  http::Router router();
  // The server's error shape for the errors the HTTP layer answers itself.
  static http::Response http_error(http::Status status, const std::string& message);

 private:
  // A generation request, counted for the dashboard once answered.
  asio::awaitable<void> generate_served(http::Exchange& ex, Api api);
  asio::awaitable<void> generate(http::Exchange& ex, Api api, RequestTiming& timing);
  http::Response expert_trace(const http::Request& req) const;
  http::Response expert_state(const http::Request& req) const;
  // The decode leg of a hand-off: reserve blocks, pull the prompt's KV from the prefill
  // instance (or recompute, as --kv-load-failure-policy says), then answer the rest.
  asio::awaitable<void> generate_decode_leg(http::Exchange& ex, std::vector<int32_t> prompt, GenerationFields gen, ResponseMeta meta,
                                            RequestTiming& timing);
  // The prefill/decode checks of a parsed request against this instance's role; throws
  // ApiError.
  void check_role(const GenerationFields& gen) const;
  // POST /internal/kv/release {"remote_request_id"}: 200, or 410 / 404 (api_error.h).
  asio::awaitable<void> release_lease(http::Exchange& ex);
  // GET /internal/kv/blocks: the prefix index's blocks and the last KV-events message
  // before them (docs/kv_events.md), taken at the engine's next turn.
  asio::awaitable<void> kv_blocks(http::Exchange& ex);
  http::Response health() const;
  Json health_json() const;
  // GET /dashboard/state: this instance alone, in the proxy's shape (docs/api.md).
  http::Response dashboard_state();
  http::Response kv_info() const;
  // The routes that answer at once, without the engine's outputs.
  http::Response models(const http::Request& req) const;
  http::Response metrics() const;
  http::Response tokenize(const http::Request& req) const;
  http::Response detokenize(const http::Request& req) const;

  // 401 unless the request carries the key (when one is configured).
  void check_api_key(const http::Request& req) const;
  // 404 unless model names the served model.
  void check_model(const std::string& model) const;

  AsyncEngine& engine_;
  ApiConfig config_;
  disagg::KvAgent* agent_;
  Prompter prompter_;
  int64_t created_;
  double started_unix_s_;  // in /health: a router sees a restart as a new value
  ServedRequests served_;
};

}  // namespace moe::server
