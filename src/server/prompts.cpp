#include "server/prompts.h"

#include "server/api_error.h"

namespace moe::server {

Prompter::Prompter(const Tokenizer& tok, const std::string& chat_template) : tok_(tok) {
  const std::string& source = chat_template.empty() ? tok.chat_template() : chat_template;
  if (source.empty()) {
    template_problem_ = "the model has no chat template (tokenizer.chat_template): use /v1/completions, or start the server with --chat-template";
    return;
  }
  try {
    template_.emplace(source);
  } catch (const Error& e) {
    template_problem_ = std::string("the model's chat template cannot be used: ") + e.what();
  }
}

std::vector<int32_t> Prompter::encode_text(const std::string& text, bool add_special_tokens) const {
  return tok_.encode(text, add_special_tokens, true);
}

std::string Prompter::render_chat(const ChatRequest& chat) const {
  if (!template_) throw invalid_value("messages", template_problem_);
  auto token_text = [&](int32_t id) { return id >= 0 ? tok_.spec().tokens[size_t(id)] : std::string(); };
  try {
    return template_->render(chat_context(chat.messages, chat.add_generation_prompt, token_text(tok_.bos_id()),
                                          token_text(tok_.eos_id()), chat.template_extra));
  } catch (const Error& e) {
    throw invalid_value("messages", std::string("the chat template cannot render these messages: ") + e.what());
  }
}

std::vector<int32_t> Prompter::encode_chat(const ChatRequest& chat, bool add_special_tokens) const {
  return encode_text(render_chat(chat), add_special_tokens);
}

std::vector<int32_t> Prompter::completion_prompt(const CompletionRequest& req) const {
  if (req.prompt_text) {
    std::vector<int32_t> ids = encode_text(*req.prompt_text, req.add_special_tokens);
    if (ids.empty()) throw invalid_value("prompt", "\"prompt\" encodes to no tokens");
    return ids;
  }
  return check_token_ids(req.prompt_ids, tok_.n_vocab(), "prompt");
}

}  // namespace moe::server
