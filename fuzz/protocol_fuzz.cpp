// libFuzzer target for the OpenAI request parsing. Any body must either become a completion,
// chat, tokenize or detokenize request or throw ApiError (the server's 4xx answer); no other
// exception may escape and nothing may crash. A request that parses is also fitted to a
// context, which checks its token ids, max_tokens and logit_bias against the limits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "server/api_error.h"
#include "server/protocol.h"

namespace {

using moe::server::ApiError;

void fit(moe::server::GenerationFields& gen, size_t n_prompt) {
  moe::RequestLimits limits;
  limits.n_vocab = 1000;
  limits.max_model_len = 4096;
  limits.kv_capacity_tokens = 2048;
  moe::server::fit_to_context(gen, int64_t(n_prompt % 5000) + 1, limits, "prompt");
}

enum class Kind { kCompletion, kChat, kTokenize, kDetokenize };
constexpr const char* kNames[] = {"completion", "chat", "tokenize", "detokenize"};

void parse(const std::string& body, Kind kind) {
  try {
    const moe::server::Json j = moe::server::parse_json_body(body);
    switch (kind) {
      case Kind::kCompletion: {
        moe::server::CompletionRequest r = moe::server::parse_completion_request(j);
        fit(r.gen, r.prompt_ids.size() + (r.prompt_text ? r.prompt_text->size() : 0));
        break;
      }
      case Kind::kChat: {
        moe::server::ChatRequest r = moe::server::parse_chat_request(j);
        fit(r.gen, r.messages.size() + body.size());
        break;
      }
      case Kind::kTokenize: moe::server::parse_tokenize_request(j); break;
      case Kind::kDetokenize: moe::server::check_token_ids(moe::server::parse_detokenize_request(j).tokens, 1000, "tokens"); break;
    }
  } catch (const ApiError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "protocol_fuzz: %s request: an exception other than ApiError: %s\n", kNames[int(kind)], e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (Kind k : {Kind::kCompletion, Kind::kChat, Kind::kTokenize, Kind::kDetokenize}) parse(body, k);
  return 0;
}
