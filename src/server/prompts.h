#pragma once
// Token ids for a request's prompt: completions encode text (or check ids), chat renders the
// messages with the model's own chat template first. Shared by the generation routes and
// /tokenize so that both count a prompt the same way.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace moe::server {

class Prompter {
 public:
  // Parses the chat template once: chat_template when given, else the tokenizer's own. One
  // that cannot be parsed only makes chat requests fail (with the reason), not the server.
  explicit Prompter(const Tokenizer& tok, const std::string& chat_template = "");

  std::vector<int32_t> encode_text(const std::string& text, bool add_special_tokens) const;
  // 400 naming "messages" when the model has no usable template or rendering fails.
  std::string render_chat(const ChatRequest& chat) const;
  std::vector<int32_t> encode_chat(const ChatRequest& chat, bool add_special_tokens) const;
  // A completion request's prompt ids (text encoded, or ids checked against the vocabulary).
  std::vector<int32_t> completion_prompt(const CompletionRequest& req) const;

  const Tokenizer& tokenizer() const { return tok_; }

 private:
  const Tokenizer& tok_;
  std::optional<ChatTemplate> template_;
  std::string template_problem_;  // why there is no template
};

}  // namespace moe::server
