#pragma once
// The OpenAI-compatible API over one AsyncEngine: the routes, API-key checks, and the
// hand-off between the engine thread and the I/O threads.
//
// Threads: handlers run on the HTTP server's I/O threads; they tokenize, submit to the
// engine and cancel, which AsyncEngine allows from any thread. The engine thread only
// pushes each RequestOutput into the request's Mailbox, which wakes the handler on its own
// connection's executor; it never waits on a socket.
#include <string>

#include "engine/async_engine.h"
#include "http/router.h"
#include "server/prompts.h"
#include "server/protocol.h"
#include "server/responses.h"

namespace moe::server {

namespace asio = http::asio;

struct ApiConfig {
  std::string served_model_name;  // the name clients send as "model"
  std::string model_path;         // reported as the model's "root"
  std::string api_key;            // empty: no key needed
  std::string chat_template;      // Jinja source replacing the model's own; empty: the model's
};

class OpenAiServer {
 public:
  // The engine must outlive the server and every request it is serving.
  OpenAiServer(AsyncEngine& engine, ApiConfig config);

  http::Router router();
  // The server's error shape for the errors the HTTP layer answers itself.
  static http::Response http_error(http::Status status, const std::string& message);

 private:
  asio::awaitable<void> generate(http::Exchange& ex, Api api);
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
  Prompter prompter_;
  int64_t created_;
};

}  // namespace moe::server
