// POST /v1/completions and /v1/chat/completions: parse, tokenize, submit to the engine, and
// stream or collect its outputs until the request finishes or the client leaves.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <cstdio>
#include <fmt/format.h>

#include "http/mailbox.h"
#include "server/api_error.h"
#include "server/openai_server.h"

namespace moe::server {

namespace {

// One output of one of a request's n choices.
struct ChoiceOutput {
  int32_t index;
  RequestOutput out;
};
using OutputMailbox = http::Mailbox<ChoiceOutput>;

// The engine requests of one API request (one per choice), as its handler holds them.
// Leaving the handler early (the client went away, a write failed, the server is stopping,
// a later choice could not be queued) cancels every unfinished one, which frees its KV
// blocks at the engine's next turn; the mailbox is closed either way so the engine thread
// never posts to a connection that is gone.
class RunningRequest {
 public:
  RunningRequest(AsyncEngine& engine, std::shared_ptr<OutputMailbox> mailbox, RequestTiming& timing)
      : engine_(engine), mailbox_(std::move(mailbox)), timing_(timing) {}
  ~RunningRequest() {
    mailbox_->close();
    for (size_t i = 0; i < ids_.size(); ++i) {
      if (!finished_[i]) engine_.cancel(ids_[i]);
    }
  }
  RunningRequest(const RunningRequest&) = delete;
  RunningRequest& operator=(const RunningRequest&) = delete;

  void add(int64_t id) {
    ids_.push_back(id);
    finished_.push_back(false);
  }
  OutputMailbox& mailbox() { return *mailbox_; }
  void mark_finished(int32_t index) { finished_[size_t(index)] = true; }
  void saw(const RequestOutput& out) { timing_.saw(out); }

 private:
  AsyncEngine& engine_;
  std::shared_ptr<OutputMailbox> mailbox_;
  RequestTiming& timing_;
  std::vector<int64_t> ids_;
  std::vector<bool> finished_;
};

struct Prepared {
  std::vector<int32_t> prompt;
  std::string echo_text;  // completions with echo
  GenerationFields gen;
  ResponseMeta meta;
};

http::Response collected_response(const ResponseCollector& collector) {
  if (collector.failed()) return error_response(internal_error(collector.error()));
  return json_response(collector.body());
}

asio::awaitable<void> stream_outputs(http::Exchange& ex, RunningRequest& run, StreamEncoder encoder) {
  if (!co_await ex.start_events()) co_return;
  if (!co_await ex.send_events(encoder.start())) co_return;
  while (!encoder.done()) {
    std::optional<std::vector<ChoiceOutput>> batch = co_await ex.unless_client_gone(run.mailbox().receive());
    if (!batch) co_return;
    std::vector<std::string> events;
    for (const ChoiceOutput& c : *batch) {
      run.saw(c.out);
      for (std::string& e : encoder.encode(c.index, c.out)) events.push_back(std::move(e));
      if (c.out.finished) run.mark_finished(c.index);
      if (encoder.done()) break;
    }
    if (!co_await ex.send_events(events)) co_return;
  }
  co_await ex.end_events();
}

asio::awaitable<void> collect_outputs(http::Exchange& ex, RunningRequest& run, ResponseCollector collector) {
  while (!collector.finished()) {
    std::optional<std::vector<ChoiceOutput>> batch = co_await ex.unless_client_gone(run.mailbox().receive());
    if (!batch) co_return;
    for (const ChoiceOutput& c : *batch) {
      run.saw(c.out);
      collector.add(c.index, c.out);
      if (c.out.finished) run.mark_finished(c.index);
      if (collector.finished()) break;
    }
  }
  co_await ex.respond(collected_response(collector));
}

}  // namespace

asio::awaitable<void> OpenAiServer::generate_served(http::Exchange& ex, Api api) {
  RequestTiming timing;
  co_await generate(ex, api, timing);
  served_.finished(ex.status(), timing);
}

asio::awaitable<void> OpenAiServer::generate(http::Exchange& ex, Api api, RequestTiming& timing) {
  std::optional<ApiError> error;
  Prepared p;
  try {
    check_api_key(ex.request());
    const Json body = parse_json_body(ex.request().body());
    if (api == Api::kChat) {
      ChatRequest chat = parse_chat_request(body);
      if (chat.gen.model) check_model(*chat.gen.model);
      p.prompt = prompter_.encode_chat(chat, chat.add_special_tokens);
      p.gen = std::move(chat.gen);
    } else {
      CompletionRequest completion = parse_completion_request(body);
      if (completion.gen.model) check_model(*completion.gen.model);
      p.prompt = prompter_.completion_prompt(completion);
      if (completion.gen.echo) {
        p.echo_text = completion.prompt_text ? *completion.prompt_text
                                             : engine_.tokenizer().decode(p.prompt, completion.gen.params.skip_special_tokens);
      }
      p.gen = std::move(completion.gen);
    }
    fit_to_context(p.gen, int64_t(p.prompt.size()), engine_.limits(), api == Api::kChat ? "messages" : "prompt");
    check_role(p.gen);
  } catch (const ApiError& e) {
    error = e;
  }
  if (error) {
    co_await ex.respond(error_response(*error));
    co_return;
  }
  p.meta.api = api;
  p.meta.id = new_response_id(api);
  p.meta.created = unix_now();
  p.meta.model = config_.served_model_name;
  p.meta.logprobs = p.gen.params.sampling.logprobs;
  p.meta.top_logprobs = p.gen.params.sampling.top_logprobs;
  p.meta.include_usage = p.gen.include_usage;
  p.meta.token_ids = p.gen.return_token_ids;
  p.meta.choices = p.gen.n;
  p.meta.echo_text = p.echo_text;
  if (p.gen.echo) p.meta.echo_tokens = p.prompt;

  if (p.gen.kv_transfer && p.gen.kv_transfer->do_remote_prefill) {
    p.meta.continuation = true;
    co_await generate_decode_leg(ex, std::move(p.prompt), std::move(p.gen), std::move(p.meta), timing);
    co_return;
  }
  if (p.gen.kv_transfer && p.gen.kv_transfer->do_remote_decode) {
    // With max_tokens 1 the first token is the whole answer: nothing to hand off.
    p.gen.params.remote_decode = p.gen.params.max_tokens > 1;
    p.meta.kv_transfer = [this, prompt = p.prompt](const RequestOutput& out) -> Json {
      if (!out.kv || out.tokens.empty()) return nullptr;
      disagg::Handoff h = agent_->handoff(out.kv->table, out.id, prompt, out.tokens.back().token);
      h.draft_token_ids = out.kv->draft_tokens;
      Json handoff = disagg::to_json(h);
      // For a router's prefill-time model: how much of the prompt P did not compute.
      handoff["prompt_cached_tokens"] = out.n_cached_tokens;
      return handoff;
    };
  }

  auto mailbox = std::make_shared<OutputMailbox>(co_await asio::this_coro::executor);
  RunningRequest run(engine_, mailbox, timing);
  try {
    for (int32_t i = 0; i < p.gen.n && !error; ++i) {
      GenerateParams params = p.gen.params;
      // Seeded choices stay reproducible and still differ from one another.
      if (params.sampling.seed) params.sampling.seed = *params.sampling.seed + uint64_t(i);
      const std::optional<int64_t> id =
          engine_.submit(p.prompt, std::move(params), [mailbox, i](RequestOutput&& out) { mailbox->push({i, std::move(out)}); });
      if (id) {
        run.add(*id);
      } else {
        error = queue_full(fmt::format("the server is at capacity: {} requests are already waiting; retry later",
                                       engine_.config().max_waiting));
      }
    }
  } catch (const RequestError& e) {
    error = invalid_value(e.param(), e.what());
  }
  if (error) {
    co_await ex.respond(error_response(*error));
    co_return;
  }
  if (p.gen.stream) co_await stream_outputs(ex, run, StreamEncoder(p.meta, engine_.tokenizer()));
  else co_await collect_outputs(ex, run, ResponseCollector(p.meta, engine_.tokenizer()));
}

asio::awaitable<void> OpenAiServer::generate_decode_leg(http::Exchange& ex, std::vector<int32_t> prompt, GenerationFields gen,
                                                        ResponseMeta meta, RequestTiming& timing) {
  const disagg::Handoff& h = gen.kv_transfer->handoff;
  if (h.prompt_token_ids != prompt) {
    co_await ex.respond(error_response(invalid_value(
        "kv_transfer_params", fmt::format("prompt_token_ids ({} tokens) are not this instance's tokens for the prompt ({} tokens): the "
                                          "prefill and decode instances must use the same tokenizer and chat template",
                                          h.prompt_token_ids.size(), prompt.size()))));
    co_return;
  }
  const auto ex_exec = co_await asio::this_coro::executor;
  auto mailbox = std::make_shared<OutputMailbox>(ex_exec);
  RunningRequest run(engine_, mailbox, timing);
  std::optional<ApiError> error;
  std::optional<int64_t> id;
  try {
    id = engine_.submit_remote(prompt, h.first_token_id, h.draft_token_ids, gen.params,
                               [mailbox](RequestOutput&& out) { mailbox->push({0, std::move(out)}); });
    if (!id) {
      error = queue_full(fmt::format("the server is at capacity: {} requests are already waiting; retry later", engine_.config().max_waiting));
    }
  } catch (const RequestError& e) {
    error = invalid_value(e.param(), e.what());
  }
  if (error) {
    asio::co_spawn(ex_exec, agent_->release(h), asio::detached);
    co_await ex.respond(error_response(*error));
    co_return;
  }
  run.add(*id);

  // The engine's first output says which blocks to fill (or that the request ended first).
  std::optional<KvBlocks> blocks;
  while (!blocks) {
    std::optional<std::vector<ChoiceOutput>> batch = co_await ex.unless_client_gone(mailbox->receive());
    if (!batch) {
      asio::co_spawn(ex_exec, agent_->release(h), asio::detached);
      co_return;
    }
    for (ChoiceOutput& c : *batch) {
      if (c.out.kv) blocks = std::move(c.out.kv);
      if (!c.out.finished) continue;
      run.mark_finished(0);
      asio::co_spawn(ex_exec, agent_->release(h), asio::detached);
      const std::string why = c.out.error.empty() ? "the request ended before its KV was loaded" : c.out.error;
      co_await ex.respond(error_response(internal_error(why)));
      co_return;
    }
  }
  std::optional<disagg::PullResult> pulled =
      co_await ex.unless_client_gone(agent_->pull(h, blocks->table, blocks->n_cached, blocks->n_tokens));
  if (!pulled) co_return;  // the client left: the pull was cancelled and the lease released
  if (!pulled->ok()) {
    const bool recompute =
        pulled->failure != disagg::PullFailure::kMismatch && agent_->config().on_load_failure == disagg::LoadFailurePolicy::kRecompute;
    std::fprintf(stderr, "serve: request %lld: %s%s\n", (long long)*id, pulled->error.c_str(),
                 recompute ? "; recomputing the prompt here" : "");
    if (!recompute) {
      co_await ex.respond(error_response(kv_transfer_failed(pulled->error)));
      co_return;
    }
  }
  engine_.kv_loaded(*id, pulled->ok());
  if (gen.stream) co_await stream_outputs(ex, run, StreamEncoder(std::move(meta), engine_.tokenizer()));
  else co_await collect_outputs(ex, run, ResponseCollector(std::move(meta), engine_.tokenizer()));
}

void OpenAiServer::check_role(const GenerationFields& gen) const {
  using disagg::Role;
  const bool to_prefill = gen.kv_transfer && gen.kv_transfer->do_remote_decode;
  const bool to_decode = gen.kv_transfer && gen.kv_transfer->do_remote_prefill;
  if ((to_prefill || to_decode) && !agent_) {
    throw wrong_role("this instance takes no part in prefill/decode hand-offs: start it with --role prefill|decode or with --kv-transport");
  }
  if (config_.role == Role::kDecode && !to_decode) {
    throw wrong_role("this is a decode instance: a request needs the kv_transfer_params of a prefill instance's answer "
                     "(do_remote_prefill); send it through moengine proxy");
  }
  if (config_.role == Role::kPrefill && !to_prefill) {
    throw wrong_role("this is a prefill instance: a request needs kv_transfer_params {\"do_remote_decode\": true}; send it "
                     "through moengine proxy");
  }
  if (to_decode && gen.echo) throw unsupported("echo", "\"echo\" belongs to the prefill instance's answer, not the decode leg");
}

}  // namespace moe::server
