// POST /v1/completions and /v1/chat/completions: parse, tokenize, submit to the engine, and
// stream or collect its outputs until the request finishes or the client leaves.
#include <boost/asio/this_coro.hpp>
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
  RunningRequest(AsyncEngine& engine, std::shared_ptr<OutputMailbox> mailbox) : engine_(engine), mailbox_(std::move(mailbox)) {}
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

 private:
  AsyncEngine& engine_;
  std::shared_ptr<OutputMailbox> mailbox_;
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
      collector.add(c.index, c.out);
      if (c.out.finished) run.mark_finished(c.index);
      if (collector.finished()) break;
    }
  }
  co_await ex.respond(collected_response(collector));
}

}  // namespace

asio::awaitable<void> OpenAiServer::generate(http::Exchange& ex, Api api) {
  std::optional<ApiError> error;
  Prepared p;
  try {
    check_api_key(ex.request());
    const Json body = parse_json_body(ex.request().body());
    if (api == Api::kChat) {
      ChatRequest chat = parse_chat_request(body);
      check_model(chat.gen.model);
      p.prompt = prompter_.encode_chat(chat, chat.add_special_tokens);
      p.gen = std::move(chat.gen);
    } else {
      CompletionRequest completion = parse_completion_request(body);
      check_model(completion.gen.model);
      p.prompt = prompter_.completion_prompt(completion);
      if (completion.gen.echo) {
        p.echo_text = completion.prompt_text ? *completion.prompt_text
                                             : engine_.tokenizer().decode(p.prompt, completion.gen.params.skip_special_tokens);
      }
      p.gen = std::move(completion.gen);
    }
    fit_to_context(p.gen, int64_t(p.prompt.size()), engine_.limits(), api == Api::kChat ? "messages" : "prompt");
  } catch (const ApiError& e) {
    error = e;
  }
  if (error) {
    co_await ex.respond(error_response(*error));
    co_return;
  }
  p.meta = ResponseMeta{api,
                        new_response_id(api),
                        unix_now(),
                        config_.served_model_name,
                        p.gen.params.sampling.logprobs,
                        p.gen.params.sampling.top_logprobs,
                        p.gen.include_usage,
                        p.gen.n,
                        p.echo_text,
                        p.gen.echo ? p.prompt : std::vector<int32_t>{}};

  auto mailbox = std::make_shared<OutputMailbox>(co_await asio::this_coro::executor);
  RunningRequest run(engine_, mailbox);
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

}  // namespace moe::server
