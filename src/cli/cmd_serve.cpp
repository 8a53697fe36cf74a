// moengine serve: one engine instance behind the OpenAI-compatible HTTP API.
#include <fmt/format.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>

#include "cli/chat_template_arg.h"
#include "cli/commands.h"
#include "cli/expert_parallel_args.h"
#include "cli/model_loading.h"
#include "cli/kv_dtype_arg.h"
#include "cli/speculative_arg.h"
#include "cli/rank_addresses.h"
#include "core/error.h"
#include "disagg/kv_agent.h"
#include "disagg/model_fingerprint.h"
#include "engine/async_engine.h"
#include "http/server.h"
#include "kv_events/publisher.h"
#include "server/openai_server.h"
#include "tokenizer/gguf_vocab.h"

namespace moe::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  AddressFlags addresses{"127.0.0.1", "8000", "", "0", ""};
  RankAddresses at;  // this rank's, from `addresses`
  std::string api_key;
  std::string served_model_name;
  std::string chat_template;
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 64;
  double kv_cache_memory = 1.0;
  int32_t block_size = 16;
  KvDtype kv_dtype = kKvDtypeAuto;
  SpeculativeConfig speculative;
  size_t max_waiting = 256;
  std::string scheduling_policy = "fcfs";
  int threads = 0;
  size_t max_body_bytes = size_t(16) << 20;
  // Prefill/decode disaggregation.
  std::string role = "both";
  std::string engine_id;
  std::string kv_transport;  // empty: ucx for the prefill and decode roles, none for both
  ExpertParallelArgs ep;
  int64_t kv_lease_ms = 30000;
  std::string kv_load_failure_policy = "recompute";
};

// The instance's part in prefill/decode hand-offs; none for a plain (role both) instance
// started without --kv-transport.
std::unique_ptr<disagg::KvAgent> make_kv_agent(const ServeArgs& a, AsyncEngine& engine, const Model& model) {
  const disagg::Role role = disagg::parse_role(a.role);
  if (role == disagg::Role::kBoth && a.kv_transport.empty()) return nullptr;
  if (a.kv_lease_ms < 1) fail("--kv-lease-ms must be at least 1, got {}", a.kv_lease_ms);
  disagg::PdConfig pd;
  pd.role = role;
  pd.engine_id = a.engine_id;
  pd.transport.kind = disagg::parse_transport_kind(a.kv_transport.empty() ? "ucx" : a.kv_transport);
  pd.transport.host = a.at.kv_host.empty() ? a.at.host : a.at.kv_host;
  if (pd.transport.host == "0.0.0.0" || pd.transport.host == "::") {
    fail("--kv-host: with --host {} give the address other instances reach this one at", a.at.host);
  }
  pd.transport.port = uint16_t(a.at.kv_port);
  pd.http_host = pd.transport.host;
  pd.lease = std::chrono::milliseconds(a.kv_lease_ms);
  pd.on_load_failure = disagg::parse_load_failure_policy(a.kv_load_failure_policy);
  return std::make_unique<disagg::KvAgent>(pd, engine.kv(), disagg::model_fingerprint(model.file(), engine.kv().dtype()));
}

void run(ServeArgs a) {
  // Every rank checks every rank's addresses, so that all of them stop with the same error.
  const int ranks = std::max(1, a.ep.ep);
  for (int r = 0; r < ranks; ++r) (void)rank_addresses(a.addresses, r, ranks);
  if (a.max_num_seqs < 1) fail("--max-num-seqs must be at least 1, got {}", a.max_num_seqs);
  if (a.max_num_batched_tokens < a.max_num_seqs) {
    fail("--max-num-batched-tokens ({}) must be at least --max-num-seqs ({}): every running sequence decodes one token a step",
         a.max_num_batched_tokens, a.max_num_seqs);
  }
  if (a.max_model_len < 0) fail("--max-model-len must be >= 0 (0: the model's context length), got {}", a.max_model_len);
  if (a.max_waiting < 1) fail("--max-waiting must be at least 1, got {}", a.max_waiting);
  if (a.max_body_bytes < 1) fail("--max-body-bytes must be at least 1");
  if (a.role == "prefill" && a.speculative.enabled() && !speculative_uses_mtp(a.speculative)) {
    fail("--speculative-config: a prefill instance does not decode, so it drafts nothing with method {}; only method mtp "
         "is taken there (it keeps the MTP layer's KV for its decode instances)", speculative_method_name(a.speculative.method));
  }
  const std::string chat_template = chat_template_source(a.chat_template);
  // Chosen now: the hand-offs, the KV-events topic and /health all name the instance by it.
  if (a.engine_id.empty()) a.engine_id = disagg::new_engine_id();

  EpGroup group = join_expert_parallel_group(a.ep);
  // Each rank is an instance of its own, on its own addresses.
  a.at = rank_addresses(a.addresses, group.rank(), group.size());
  if (group.size() > 1) a.engine_id += "-rank" + std::to_string(group.rank());
  // A rank of a group reads only its own experts' weights (attach_expert_parallel).
  auto model = load_model_with_progress(a.model, !group.comm);
  attach_expert_parallel(group, a.ep, *model);
  if (!model->file().has("tokenizer.ggml.tokens")) fail("{}: the file has no tokenizer (tokenizer.ggml.tokens); serve needs one", a.model.path);
  const Tokenizer tok(tokenizer_spec_from_gguf(model->file()));

  AsyncEngineConfig ec;
  ec.engine.scheduler.max_num_batched_tokens = a.max_num_batched_tokens;
  ec.engine.scheduler.max_num_seqs = a.max_num_seqs;
  ec.engine.scheduler.policy = a.scheduling_policy == "priority" ? SchedulerConfig::Policy::kPriority : SchedulerConfig::Policy::kFcfs;
  ec.engine.block_size = a.block_size;
  ec.engine.kv_dtype = a.kv_dtype;
  ec.engine.speculative = a.speculative;
  ec.engine.n_blocks = kv_blocks_for_memory(*model, a.kv_cache_memory, a.block_size, a.kv_dtype, speculative_uses_mtp(a.speculative));
  // An explicit length the model or the cache cannot hold is refused; the default (the
  // model's context) is only capped, per request, at the cache's size.
  if (a.max_model_len > model->config().n_ctx_train) {
    fail("--max-model-len {} is more than the model's context length ({} tokens)", a.max_model_len, model->config().n_ctx_train);
  }
  const int64_t kv_tokens = int64_t(ec.engine.n_blocks) * a.block_size;
  if (a.max_model_len > kv_tokens) {
    fail("--max-model-len {} is more than the KV cache holds ({} tokens in {} GiB); raise --kv-cache-memory or lower --max-model-len",
         a.max_model_len, kv_tokens, a.kv_cache_memory);
  }
  ec.engine.max_model_len = a.max_model_len;
  ec.engine.kv_lease = std::chrono::milliseconds(a.kv_lease_ms);
  ec.threads = a.threads;
  ec.max_waiting = a.max_waiting;
  // Signals are waited for before the server starts, so one that arrives while it starts is
  // not lost; a failed expert-parallel group stops the process the same way.
  boost::asio::io_context signals_ctx;
  boost::asio::signal_set signals(signals_ctx, SIGINT, SIGTERM);
  int received = 0;
  signals.async_wait([&](const boost::system::error_code& ec2, int sig) {
    if (!ec2) received = sig;
  });
  std::string group_failure;
  ec.on_group_failure = [&](const std::string& why) {
    boost::asio::post(signals_ctx, [&, why] {
      group_failure = why;
      signals.cancel();
    });
  };
  // Declared before the engine, whose thread publishes through it until it is joined.
  std::unique_ptr<kv_events::KvEventPublisher> kv_publisher;
  if (!a.at.kv_events_endpoint.empty()) {
    kv_publisher = std::make_unique<kv_events::KvEventPublisher>(kv_events::PublisherConfig{a.at.kv_events_endpoint, a.engine_id});
    ec.kv_event_sink = [p = kv_publisher.get()](uint64_t seq, std::vector<kv_events::KvEvent> events) { p->publish(seq, std::move(events)); };
  }
  // Declared before the server so that it outlives every handler holding one of its requests.
  AsyncEngine engine(*model, tok, ec);
  const RequestLimits& limits = engine.limits();
  std::fprintf(stderr, "engine: KV cache %s, %d blocks of %d positions (%lld tokens), max_model_len %lld, max_num_seqs %d, max_num_batched_tokens %lld\n",
               kv_dtype_name(a.kv_dtype), ec.engine.n_blocks, ec.engine.block_size, (long long)limits.kv_capacity_tokens, (long long)limits.max_model_len,
               a.max_num_seqs, (long long)a.max_num_batched_tokens);
  if (a.speculative.enabled()) std::fprintf(stderr, "engine: speculative decoding %s\n", speculative_config_json(a.speculative).c_str());

  std::unique_ptr<disagg::KvAgent> agent = make_kv_agent(a, engine, *model);
  const std::string& engine_id = a.engine_id;
  std::fprintf(stderr, "engine: id %s, role %s", engine_id.c_str(), a.role.c_str());
  if (agent) {
    const nlohmann::json endpoint = agent->info()["transport"];
    std::fprintf(stderr, ", KV transport %s on %s:%d, lease %lld ms, load failures: %s, model fingerprint %s",
                 disagg::transport_kind_name(agent->config().transport.kind), endpoint.value("host", "").c_str(), endpoint.value("port", 0),
                 (long long)a.kv_lease_ms, a.kv_load_failure_policy.c_str(), agent->fingerprint().c_str());
  }
  if (kv_publisher) std::fprintf(stderr, ", KV events on %s (topic %s)", kv_publisher->endpoint().c_str(), kv_publisher->topic().c_str());
  std::fprintf(stderr, "\n");

  server::ApiConfig api;
  api.served_model_name = a.served_model_name.empty() ? a.model.path : a.served_model_name;
  api.model_path = a.model.path;
  api.api_key = a.api_key;
  api.chat_template = chat_template;
  api.role = disagg::parse_role(a.role);
  api.engine_id = engine_id;
  if (kv_publisher) api.kv_events_endpoint = kv_publisher->endpoint();
  if (group.ep) api.expert_parallel = group.ep.get();
  server::OpenAiServer openai(engine, api, agent.get());

  http::ServerConfig hc;
  hc.host = a.at.host;
  hc.port = static_cast<unsigned short>(a.at.port);
  hc.max_body_bytes = a.max_body_bytes;
  http::HttpServer server(hc, openai.router(), &server::OpenAiServer::http_error);

  server.start();
  if (agent) agent->set_http_port(server.port());
  // Ranks of a group name themselves: their output reaches one log through mpirun.
  const std::string rank_note = group.size() > 1 ? fmt::format(" (rank {} of {})", group.rank(), group.size()) : "";
  std::printf("serving %s on http://%s:%u%s\n", api.served_model_name.c_str(), a.at.host.c_str(), unsigned(server.port()),
              rank_note.c_str());
  std::fflush(stdout);
  signals_ctx.run();
  if (!group_failure.empty()) {
    server.stop();
    fail("the expert-parallel group failed: {}", group_failure);
  }
  std::fprintf(stderr, "serve: %s received, shutting down\n", received == SIGINT ? "SIGINT" : "SIGTERM");
  server.stop();
  engine.stop();
  finish_expert_parallel_run(group, a.ep);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI-compatible HTTP API");
  cmd->footer(
      "Examples:\n"
      "  moengine serve --model models/tiny.gguf --port 8000 --served-model-name tiny\n"
      "  mpirun -np 2 moengine serve --model models/tiny.gguf --port 8000 --ep 2   (ranks on 8000 and 8001)\n"
      "  curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\\n"
      "    -d '{\"model\": \"tiny\", \"prompt\": \"The experts\", \"max_tokens\": 16}'\n"
      "  moengine serve --model models/tiny.gguf --chat-template tests/server/synthetic_chat_template.jinja\n"
      "--chat-template serves /v1/chat/completions for a model without a template of its own, or overrides it.\n"
      "Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics,\n"
      "POST /tokenize, POST /detokenize, GET /dashboard (a live page of this instance; docs/dashboard.md), and\n"
      "under --ep GET /admin/expert-trace and /admin/expert-state (docs/api.md). The line 'serving NAME on http://HOST:PORT' on stdout\n"
      "says it is ready (with --port 0 it names the port chosen). SIGINT or SIGTERM stops it: requests in\n"
      "flight are aborted and their connections closed.");
  add_model_options(*cmd, args->model);
  cmd->add_option("--host", args->addresses.host,
                  "Address to listen on; under --ep N, one for all ranks or N comma-separated, one per rank")
      ->capture_default_str();
  cmd->add_option("--port", args->addresses.port,
                  "Port to listen on; 0 picks a free one. Under --ep N: P gives rank r the port P+r, or N comma-separated ports")
      ->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "Require 'Authorization: Bearer KEY' on every /v1 route");
  cmd->add_option("--served-model-name", args->served_model_name, "The name clients send as \"model\" (default: the --model path)");
  cmd->add_option("--chat-template", args->chat_template,
                  "Jinja chat template (a file, or the text) replacing the model's own (tokenizer.chat_template)");
  cmd->add_option("--max-model-len", args->max_model_len, "Longest prompt + completion in tokens (default 0: the model's context length)")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens, "Token budget of one engine step (prefill chunks + decodes)")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "Most requests running at once")->capture_default_str();
  cmd->add_option("--kv-cache-memory", args->kv_cache_memory, "GiB of memory for the paged KV cache (allocated at start)")
      ->capture_default_str();
  cmd->add_option("--block-size", args->block_size, "Positions per KV cache block")->capture_default_str();
  add_kv_dtype_option(*cmd, args->kv_dtype);
  add_speculative_option(*cmd, args->speculative);
  cmd->add_option("--max-waiting", args->max_waiting, "Requests queued but not running; more get 429 with Retry-After")
      ->capture_default_str();
  cmd->add_option("--scheduling-policy", args->scheduling_policy, "fcfs, or priority (by the request's \"priority\", lower first)")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  cmd->add_option("--threads,-t", args->threads, "Compute threads (default: one per core)");
  cmd->add_option("--max-body-bytes", args->max_body_bytes, "Largest request body; larger ones get 413")->capture_default_str();
  cmd->add_option("--role", args->role,
                  "both: prefill and decode (a plain instance); prefill: only prefills, handing the KV to a decode instance; "
                  "decode: only takes requests that arrive with KV to pull (docs/disaggregation.md)")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  cmd->add_option("--engine-id", args->engine_id, "Stable id of this instance in hand-offs, /health and /v1/models (default: random)");
  cmd->add_option("--kv-transport", args->kv_transport,
                  "How KV moves between prefill and decode instances: ucx or tcp (default ucx for --role prefill|decode; "
                  "with --role both it lets the instance take part in hand-offs)")
      ->check(CLI::IsMember({"ucx", "tcp"}));
  cmd->add_option("--kv-host", args->addresses.kv_host,
                  "Address other instances reach this one at, for KV and hand-offs (default: --host; a list per rank as --host)");
  cmd->add_option("--kv-port", args->addresses.kv_port, "Port the KV transport listens on; 0 picks a free one (per rank as --port)")
      ->capture_default_str();
  add_expert_parallel_options(*cmd, args->ep);
  cmd->add_option("--kv-lease-ms", args->kv_lease_ms,
                  "A prefill instance holds a handed-off prompt's KV blocks this long for the decode instance to pull")
      ->capture_default_str();
  cmd->add_option("--kv-load-failure-policy", args->kv_load_failure_policy,
                  "When a decode instance cannot pull the KV: recompute (prefill the prompt itself) or fail (502)")
      ->check(CLI::IsMember({"recompute", "fail"}))
      ->capture_default_str();
  cmd->add_option("--kv-events-endpoint", args->addresses.kv_events_endpoint,
                  "Publish KV-cache events (blocks stored and evicted) on a ZeroMQ PUB socket bound here, e.g. "
                  "tcp://127.0.0.1:5557 (a port of * picks one; a list per rank as --host); off by default (docs/kv_events.md)");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
