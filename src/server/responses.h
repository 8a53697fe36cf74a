#pragma once
// The response bodies and Server-Sent Event payloads, exactly as OpenAI sends them, built
// from the engine's RequestOutputs. Pure: no I/O, so each shape is unit-tested.
//
// A stream is: (chat only) a chunk with delta.role; a chunk per output that has text (or
// logprobs); a last chunk with an empty delta (chat) or empty text (completions) and the
// finish_reason; with include_usage a chunk with empty choices and the usage (every other
// chunk then has "usage": null); then [DONE].
#include <cstdint>
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

// The error object a stream sends when the engine fails a request it had accepted.
std::string stream_error_event(const std::string& message);

class StreamEncoder {
 public:
  StreamEncoder(ResponseMeta meta, const Tokenizer& tok);
  // Events to send before any output: the role chunk for chat, nothing for completions.
  std::vector<std::string> start();
  // Events for one output; the final output also gets the finish chunk, the usage chunk and
  // [DONE].
  std::vector<std::string> encode(const RequestOutput& out);

 private:
  Json chunk(Json choice) const;

  ResponseMeta meta_;
  const Tokenizer& tok_;
  int64_t text_offset_ = 0;
};

class ResponseCollector {
 public:
  ResponseCollector(ResponseMeta meta, const Tokenizer& tok);
  void add(const RequestOutput& out);
  bool finished() const { return finished_; }
  // The engine ended the request with an error: why (the response is then a 500).
  bool failed() const { return kind_ == FinishKind::kError; }
  const std::string& error() const { return error_; }
  // The whole response body, once finished.
  std::string body() const;

 private:
  ResponseMeta meta_;
  const Tokenizer& tok_;
  std::string text_;
  std::vector<TokenOutput> tokens_;
  bool finished_ = false;
  FinishKind kind_ = FinishKind::kNone;
  std::string stop_string_;
  int32_t stop_token_ = -1;
  std::string error_;
  int64_t n_prompt_ = 0, n_output_ = 0, n_cached_ = 0;
};

}  // namespace moe::server
