// moengine proxy: the front of a prefill/decode disaggregated deployment.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "http/server.h"
#include "proxy/proxy_server.h"

namespace moe::cli {
namespace {

struct ProxyArgs {
  std::vector<std::string> prefill, decode;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  double timeout_s = 600;
};

void run(const ProxyArgs& a) {
  if (a.port < 0 || a.port > 65535) fail("--port must be in [0, 65535], got {}", a.port);
  if (!(a.timeout_s > 0)) fail("--timeout-s must be more than 0, got {}", a.timeout_s);
  proxy::ProxyConfig config;
  config.prefill = a.prefill;
  config.decode = a.decode;
  config.api_key = a.api_key;
  config.timeout = std::chrono::milliseconds(int64_t(a.timeout_s * 1000));
  // Declared before the server so that it outlives every handler using it.
  proxy::ProxyServer proxy(config);

  http::ServerConfig hc;
  hc.host = a.host;
  hc.port = static_cast<unsigned short>(a.port);
  // Re-serializing every streamed event is the proxy's CPU work; a few threads keep one
  // busy stream from delaying the others.
  hc.io_threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  http::HttpServer server(hc, proxy.router(), &proxy::ProxyServer::http_error);

  // Signals are waited for before the server starts, so one that arrives while it starts is
  // not lost.
  boost::asio::io_context signals_ctx;
  boost::asio::signal_set signals(signals_ctx, SIGINT, SIGTERM);
  int received = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (!ec) received = sig;
  });
  server.start();
  std::printf("proxy on http://%s:%u\n", a.host.c_str(), unsigned(server.port()));
  std::fflush(stdout);
  signals_ctx.run();
  std::fprintf(stderr, "proxy: %s received, shutting down\n", received == SIGINT ? "SIGINT" : "SIGTERM");
  server.stop();
}

}  // namespace

void register_proxy(CLI::App& app) {
  auto args = std::make_shared<ProxyArgs>();
  CLI::App* cmd = app.add_subcommand("proxy", "Front a prefill/decode disaggregated deployment with one OpenAI-compatible API");
  cmd->footer(
      "Examples:\n"
      "  moengine serve --model models/tiny.gguf --role prefill --port 8100 &\n"
      "  moengine serve --model models/tiny.gguf --role decode --port 8200 &\n"
      "  moengine proxy --prefill http://127.0.0.1:8100 --decode http://127.0.0.1:8200 --port 8000\n"
      "  moengine proxy --prefill http://p0:8100 http://p1:8100 --decode http://d0:8200 --api-key KEY\n"
      "Each completion runs its prompt at a prefill instance, which hands its KV cache off, and the rest\n"
      "at a decode instance; the client gets one answer, streamed or not. Instances are taken in turn.\n"
      "Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models (a decode instance's),\n"
      "GET /health (every instance's), GET /metrics (the proxy's own). The line 'proxy on http://HOST:PORT'\n"
      "on stdout says it is ready (with --port 0 it names the port chosen). SIGINT or SIGTERM stops it.");
  cmd->add_option("--prefill", args->prefill, "Prefill instances, http://HOST:PORT each")->required();
  cmd->add_option("--decode", args->decode, "Decode instances, http://HOST:PORT each")->required();
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on; 0 picks a free one")->capture_default_str();
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' on every /v1 route (the header is passed on to the instances)");
  cmd->add_option("--timeout-s", args->timeout_s, "Fail a leg whose instance sends nothing for this many seconds (502)")
      ->capture_default_str();
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
