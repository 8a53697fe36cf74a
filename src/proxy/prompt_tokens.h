#pragma once
// The prompt's token ids as the instances compute them, so that the proxy can measure a
// prompt exactly and name its KV blocks by the same hashes the engines publish: the model's
// own tokenizer, and for chat its chat template rendered the way `moengine serve` does
// (server/prompts.h). Only the tokenizer is loaded, never the weights.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proxy/merge.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace moe::proxy {

class PromptTokenizer {
 public:
  // `path`: a GGUF model file, a tokenizer.json, or a Hugging Face checkpoint folder holding
  // one. `chat_template`: template text replacing the file's own ("" keeps it). Throws
  // moe::Error naming the file.
  PromptTokenizer(const std::string& path, const std::string& chat_template);

  // The ids the instances will prefill; nullopt for a body they would refuse (they answer
  // the error) or a chat request without a usable template.
  std::optional<std::vector<int32_t>> tokens(Api api, const Json& body) const;

 private:
  std::optional<std::vector<int32_t>> completion_tokens(const Json& body) const;
  std::optional<std::vector<int32_t>> chat_tokens(const Json& body) const;

  Tokenizer tok_;
  std::optional<ChatTemplate> template_;
};

}  // namespace moe::proxy
