#pragma once
// The OpenAI request bodies as moengine understands them: pure functions from JSON to
// plain structs, with every check a request can fail before it reaches the engine. Field
// types are checked first (422 naming the field), then values (400 naming the field).
// Tokenizing and the context-length checks come after, once the prompt is known.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "disagg/handoff.h"
#include "engine/engine_core.h"
#include "engine/request.h"
#include "server/json_fields.h"

namespace moe::server {

// What completions and chat share: sampling, stop conditions, streaming.
struct GenerationFields {
  std::optional<std::string> model;  // none: the served model, as vLLM and llama-server answer
  std::optional<int64_t> max_tokens;  // none: the room left in the context
  std::string max_tokens_param = "max_tokens";  // or "max_completion_tokens", for errors
  GenerateParams params;              // params.max_tokens is set by fit_to_context
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool return_token_ids = false;      // streams: each chunk carries its tokens' ids
  int32_t n = 1;                      // choices: n engine requests on the same prompt
  bool echo = false;                  // completions: the prompt comes back before the text
  // Prefill/decode: "kv_transfer_params" (disagg/handoff.h); none when absent or null.
  std::optional<disagg::KvTransferRequest> kv_transfer;
};

// The most choices one request may ask for.
inline constexpr int64_t kMaxChoices = 64;

struct CompletionRequest {
  GenerationFields gen;
  // The prompt: text to encode, or token ids as given.
  std::optional<std::string> prompt_text;
  std::vector<int64_t> prompt_ids;
  bool add_special_tokens = true;  // BOS as the tokenizer asks
};

struct ChatRequest {
  GenerationFields gen;
  // Messages for the chat template, each content flattened to a string (text parts joined
  // with newlines); other fields (name, tool_calls, ...) are passed on as sent.
  Json messages;
  Json template_extra = Json::object();  // tools, chat_template_kwargs
  bool add_generation_prompt = true;
  bool add_special_tokens = false;  // the template writes its own BOS
};

CompletionRequest parse_completion_request(const Json& body);
ChatRequest parse_chat_request(const Json& body);

// POST /tokenize: {"prompt"} or {"messages"}; POST /detokenize: {"tokens"}.
struct TokenizeRequest {
  std::optional<std::string> model;
  std::optional<std::string> prompt;
  std::optional<ChatRequest> chat;  // with messages
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize_request(const Json& body);

struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int64_t> tokens;
};
DetokenizeRequest parse_detokenize_request(const Json& body);

// The most positions one request may use: max_model_len, and the KV cache's size.
int64_t context_limit(const RequestLimits& limits);

// Token ids must be in the vocabulary; param names the field in errors.
std::vector<int32_t> check_token_ids(const std::vector<int64_t>& ids, int64_t n_vocab, const std::string& param);

// Once the prompt is tokenized: 400 when it leaves no room for one token, or when max_tokens
// asks for more than the room left; otherwise sets gen.params.max_tokens (max_tokens, or
// the room left). Checks stop_token_ids against the vocabulary. prompt_param is "prompt" or
// "messages".
void fit_to_context(GenerationFields& gen, int64_t n_prompt, const RequestLimits& limits, const std::string& prompt_param);

}  // namespace moe::server
