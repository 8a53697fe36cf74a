// moengine proxy: the front of a prefill/decode disaggregated deployment.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/chat_template_arg.h"
#include "cli/commands.h"
#include "core/error.h"
#include "http/server.h"
#include "proxy/instances_file.h"
#include "proxy/policy/route.h"
#include "proxy/proxy_server.h"

namespace moe::cli {
namespace {

struct ProxyArgs {
  std::vector<std::string> prefill, decode, unified;
  std::string config;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key, admin_key;
  std::string policy = "cost";
  double timeout_s = 600;
  int max_attempts = 3;
  size_t max_queued = 1024;
  double queue_timeout_s = 30;
  int health_interval_ms = 1000;
  std::string access_log;
  std::string tokenizer, chat_template;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;
};

void add_instances(proxy::ProxyConfig& config, const std::vector<std::string>& urls, proxy::InstanceRole role) {
  for (const std::string& url : urls) config.instances.push_back(proxy::InstanceSpec{"", url, role, 1.0});
}

void run(const ProxyArgs& a) {
  if (a.port < 0 || a.port > 65535) fail("--port must be in [0, 65535], got {}", a.port);
  if (!(a.timeout_s > 0)) fail("--timeout-s must be more than 0, got {}", a.timeout_s);
  if (a.max_attempts < 1) fail("--max-attempts must be at least 1, got {}", a.max_attempts);
  if (!(a.queue_timeout_s >= 0)) fail("--queue-timeout-s must be at least 0, got {}", a.queue_timeout_s);
  if (a.health_interval_ms < 10) fail("--health-interval-ms must be at least 10, got {}", a.health_interval_ms);
  if (!(a.slo_ttft_ms >= 0) || !(a.slo_tpot_ms >= 0)) fail("--slo-ttft-ms and --slo-tpot-ms must be at least 0 (0: not set)");
  proxy::ProxyConfig config;
  if (!a.config.empty()) config.instances = proxy::load_instances_file(a.config);
  add_instances(config, a.prefill, proxy::InstanceRole::prefill);
  add_instances(config, a.decode, proxy::InstanceRole::decode);
  add_instances(config, a.unified, proxy::InstanceRole::both);
  const auto has = [&](proxy::InstanceRole role) {
    return std::any_of(config.instances.begin(), config.instances.end(), [&](const proxy::InstanceSpec& i) { return i.role == role; });
  };
  if ((!has(proxy::InstanceRole::prefill) || !has(proxy::InstanceRole::decode)) && !has(proxy::InstanceRole::both)) {
    fail("give prefill and decode instances (--prefill, --decode), unified ones (--unified), or both, on the command line or "
         "in a --config file");
  }
  config.api_key = a.api_key;
  config.admin_key = a.admin_key;
  config.scheduler.policy = routing::parse_policy_name(a.policy);
  config.timeout = std::chrono::milliseconds(int64_t(a.timeout_s * 1000));
  config.dispatch.max_attempts = a.max_attempts;
  config.dispatch.max_queued = a.max_queued;
  config.dispatch.queue_timeout = std::chrono::milliseconds(int64_t(a.queue_timeout_s * 1000));
  config.health.interval = std::chrono::milliseconds(a.health_interval_ms);
  config.health.timeout = std::min(config.health.interval, std::chrono::milliseconds(2000));
  config.access_log = a.access_log;
  config.tokenizer = a.tokenizer;
  config.chat_template = chat_template_source(a.chat_template);
  config.slo = {a.slo_ttft_ms / 1000, a.slo_tpot_ms / 1000};
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
      "  moengine proxy --prefill http://p0:8100 http://p1:8100 --decode http://d0:8200 --policy least_load\n"
      "  moengine proxy --prefill http://p0:8100 --decode http://d0:8200 --unified http://u0:8300 --admin-key SECRET\n"
      "  moengine proxy --config instances.yaml   # names, roles, URLs and weights (docs/proxy.md)\n"
      "Each completion runs its prompt at a prefill instance, which hands its KV cache off, and the rest\n"
      "at a decode instance; the client gets one answer, streamed or not. The policy picks the instance of\n"
      "each leg (docs/proxy.md); under 'cost' a short request may run whole at a free unified instance.\n"
      "A leg whose instance fails before the client saw any of it runs again at another instance, and a\n"
      "stream whose decode instance dies mid-way goes on at another pair; an instance that fails 3 times\n"
      "in a row, or does not answer GET /health, takes no traffic until it does. With --tokenizer, prompts\n"
      "are matched against the prefix caches of instances that publish KV events (serve --kv-events-endpoint).\n"
      "Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models (a decode instance's),\n"
      "GET /health (every instance's state), GET /metrics (the proxy's own), and with --admin-key:\n"
      "GET /admin/instances, POST /admin/instances/{add,drain,resume,remove}. The line\n"
      "'proxy on http://HOST:PORT' on stdout says it is ready (with --port 0 it names the port chosen).\n"
      "SIGINT or SIGTERM stops it.");
  cmd->add_option("--prefill", args->prefill, "Prefill instances, http://HOST:PORT each");
  cmd->add_option("--decode", args->decode, "Decode instances, http://HOST:PORT each");
  cmd->add_option("--unified", args->unified, "Unified instances (serve --role both), http://HOST:PORT each");
  cmd->add_option("--config", args->config,
                  "A YAML file of instances, each with its url, role and optional name and weight (docs/proxy.md); "
                  "adds to --prefill/--decode/--unified")
      ->check(CLI::ExistingFile);
  cmd->add_option("--policy", args->policy, "Routing policy: cost, round_robin, least_load, power_of_two, cache_aware")
      ->capture_default_str();
  cmd->add_option("--admin-key", args->admin_key, "Turn the admin API on, behind 'Authorization: Bearer KEY'");
  cmd->add_option("--max-attempts", args->max_attempts, "Instances one leg may be tried on before the client gets the error")
      ->capture_default_str();
  cmd->add_option("--max-queued", args->max_queued, "Requests that may wait for an instance; one more gets 429")
      ->capture_default_str();
  cmd->add_option("--queue-timeout-s", args->queue_timeout_s, "A request waiting this long for an instance gets 503")
      ->capture_default_str();
  cmd->add_option("--health-interval-ms", args->health_interval_ms, "How often every instance's GET /health is probed")
      ->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "The model's tokenizer (its GGUF file, a tokenizer.json or a checkpoint folder): prompts are measured exactly");
  cmd->add_option("--chat-template", args->chat_template,
                  "Jinja chat template (a file, or the text) replacing the tokenizer's own; give the instances' --chat-template");
  cmd->add_option("--access-log", args->access_log,
                  "Append a JSON line per request (its routing, retries, hand-off, first token, status) to this file; - for stdout");
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on; 0 picks a free one")->capture_default_str();
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' on every /v1 route (the header is passed on to the instances)");
  cmd->add_option("--timeout-s", args->timeout_s, "Fail a leg whose instance sends nothing for this many seconds (502)")
      ->capture_default_str();
  cmd->add_option("--slo-ttft-ms", args->slo_ttft_ms,
                  "Time-to-first-token SLO for the dashboard's goodput: streamed answers within it (and --slo-tpot-ms) count "
                  "(0: not set)");
  cmd->add_option("--slo-tpot-ms", args->slo_tpot_ms, "Mean time-per-output-token SLO for the dashboard's goodput (0: not set)");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
