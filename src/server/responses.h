#pragma once
// The response bodies and Server-Sent Event payloads, exactly as OpenAI sends them, built
// from the engine's RequestOutputs. Pure: no I/O, so each shape is unit-tested.
//
// A stream is: (chat only) a chunk with delta.role per choice; a chunk per output that has
// text (or logprobs); per choice a last chunk with an empty delta (chat) or empty text
// (completions) and the finish_reason; once every choice has finished, with include_usage a
// chunk with empty choices and the usage (every other chunk then has "usage": null); then
// [DONE]. With n > 1 the choices' chunks interleave, each naming its index.
//
// Usage over n choices: the prompt counts once (as OpenAI bills it), completion tokens are
// summed; cached prompt tokens are those of choice 0.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "http/types.h"
#include "server/json_fields.h"

namespace moe {
class Tokenizer;
}

namespace moe::server {

enum class Api { kCompletion, kChat };

struct ResponseMeta {
  Api api = Api::kCompletion;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool include_usage = false;  // streams only
  // Streams only (vLLM's "return_token_ids"): every choice chunk carries "token_ids", the ids
  // of the tokens generated since the choice's previous chunk (a token whose text is held
  // back rides with the chunk that releases it, or with the finish chunk). A router that
  // has to continue the answer elsewhere knows from them where it stands.
  bool token_ids = false;
  int32_t choices = 1;         // n
  // Completions with echo: the prompt's text and ids (none without echo), sent back before
  // each choice's text (and, with logprobs, the prompt tokens' logprobs first, the first
  // token's null).
  std::string echo_text;
  std::vector<int32_t> echo_tokens;
  bool echo() const { return !echo_tokens.empty(); }
  // A decode instance's continuation of a prefill instance's answer: no role chunk.
  bool continuation = false;
  // A prefill instance's answer: its value of "kv_transfer_params" for the final output
  // (top level of the body, or of the stream's finish chunk). Unset: no such field.
  std::function<Json(const RequestOutput&)> kv_transfer;
};

// A 200 response with a JSON body.
http::Response json_response(std::string body);

// A fresh response id with the API's prefix and 32 random hex digits.
std::string new_response_id(Api api);
int64_t unix_now();

// The usage object: prompt, completion and total tokens, and the prompt tokens served from
// the prefix cache.
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// The logprobs of some tokens in the API's shape. Completions: {"text_offset", "token_logprobs",
// "tokens", "top_logprobs"}, offsets counted on from text_offset, which is advanced past these
// tokens; chat: {"content": [...]}.
Json logprobs_json(Api api, const Tokenizer& tok, const std::vector<TokenOutput>& tokens, int64_t& text_offset, int32_t top_n);

// Completion logprobs of an echoed prompt: its first token with null logprob and top list,
// then prompt_logprobs (one per later prompt token), then `generated`.
Json echo_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& prompt, const std::vector<TokenOutput>& prompt_logprobs,
                        const std::vector<TokenOutput>& generated, int64_t& text_offset, int32_t top_n);

// The error object a stream sends when the engine fails a request it had accepted.
std::string stream_error_event(const std::string& message);

// Token counts of a request's choices, summed as the usage object reports them.
class UsageTally {
 public:
  explicit UsageTally(int32_t choices) : output_(size_t(choices), 0), drafted_(size_t(choices), 0), accepted_(size_t(choices), 0) {}
  void record(int32_t index, const RequestOutput& out);
  // With speculative decoding, "completion_tokens_details" says how many drafted tokens
  // were accepted and rejected, in the fields OpenAI names for predicted outputs.
  Json json() const;

 private:
  int64_t prompt_ = 0, cached_ = 0;
  std::vector<int64_t> output_, drafted_, accepted_;
};

class StreamEncoder {
 public:
  StreamEncoder(ResponseMeta meta, const Tokenizer& tok);
  // Events to send before any output: the role chunks for chat, nothing for completions.
  std::vector<std::string> start();
  // Events for one output of choice `index`; its final output also gets the choice's finish
  // chunk, and the last choice to finish the usage chunk and [DONE]. An engine error ends
  // the whole stream (error event and [DONE]).
  std::vector<std::string> encode(int32_t index, const RequestOutput& out);
  // [DONE] has been produced: nothing more to send.
  bool done() const { return done_; }

 private:
  Json chunk(Json choice) const;

  ResponseMeta meta_;
  const Tokenizer& tok_;
  std::vector<int64_t> text_offset_;  // per choice
  std::vector<bool> started_;         // per choice: its first output was encoded
  std::vector<Json> pending_ids_;     // per choice, with meta.token_ids: ids not sent yet
  int32_t open_;                      // choices not finished yet
  UsageTally usage_;
  bool done_ = false;
};

class ResponseCollector {
 public:
  ResponseCollector(ResponseMeta meta, const Tokenizer& tok);
  void add(int32_t index, const RequestOutput& out);
  // Every choice has finished, or one failed.
  bool finished() const { return open_ == 0 || failed(); }
  // The engine ended a choice with an error: why (the response is then a 500).
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // The whole response body, once finished.
  std::string body() const;

 private:
  struct Choice {
    std::string text;
    std::vector<TokenOutput> prompt_logprobs;  // with echo and logprobs
    std::vector<TokenOutput> tokens;
    FinishKind kind = FinishKind::kNone;
    std::string stop_string;
    int32_t stop_token = -1;
    Json kv_transfer;  // with meta.kv_transfer, from the final output
  };

  ResponseMeta meta_;
  const Tokenizer& tok_;
  std::vector<Choice> choices_;
  int32_t open_;
  UsageTally usage_;
  std::string error_;
};

}  // namespace moe::server
