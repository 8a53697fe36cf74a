#include "proxy/prompt_tokens.h"

#include <filesystem>

#include "model/gguf.h"
#include "tokenizer/gguf_vocab.h"

namespace moe::proxy {

namespace {

Tokenizer load(const std::string& path) {
  const std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) return load_hf_tokenizer((p / "tokenizer.json").string());
  if (p.extension() == ".json") return load_hf_tokenizer(path);
  const GgufFile file(path);
  return Tokenizer(tokenizer_spec_from_gguf(file));
}

bool flag(const Json& body, const char* key, bool fallback) {
  const Json* v = member(body, key);
  return v && v->is_boolean() ? v->get<bool>() : fallback;
}

// A message's content as serve flattens it (server/protocol.cpp): a string, or its text
// parts joined with newlines; nullopt for anything serve refuses.
std::optional<std::string> content_text(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return std::nullopt;
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const Json* type = member(part, "type");
    const Json* t = member(part, "text");
    if (!type || *type != "text" || !t || !t->is_string()) return std::nullopt;
    if (i > 0) text += '\n';
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace

PromptTokenizer::PromptTokenizer(const std::string& path, const std::string& chat_template) : tok_(load(path)) {
  const std::string& source = chat_template.empty() ? tok_.chat_template() : chat_template;
  if (!source.empty()) template_.emplace(source);
}

std::optional<std::vector<int32_t>> PromptTokenizer::tokens(Api api, const Json& body) const {
  try {
    return api == Api::kChat ? chat_tokens(body) : completion_tokens(body);
  } catch (const std::exception&) {
    return std::nullopt;  // the instance will say what is wrong with it
  }
}

std::optional<std::vector<int32_t>> PromptTokenizer::completion_tokens(const Json& body) const {
  const Json* prompt = member(body, "prompt");
  if (!prompt) return std::nullopt;
  const Json* one = prompt;
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) one = &(*prompt)[0];
  if (one->is_string()) return tok_.encode(one->get<std::string>(), flag(body, "add_special_tokens", true), true);
  if (!one->is_array() || one->empty()) return std::nullopt;
  std::vector<int32_t> ids;
  for (const Json& id : *one) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tok_.n_vocab()) return std::nullopt;
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

std::optional<std::vector<int32_t>> PromptTokenizer::chat_tokens(const Json& body) const {
  const Json* messages = member(body, "messages");
  if (!template_ || !messages || !messages->is_array() || messages->empty()) return std::nullopt;
  Json flat = Json::array();
  for (const Json& m : *messages) {
    if (!m.is_object()) return std::nullopt;
    Json msg = m;
    if (const Json* content = member(m, "content")) {
      const std::optional<std::string> text = content_text(*content);
      if (!text) return std::nullopt;
      msg["content"] = *text;
    }
    flat.push_back(std::move(msg));
  }
  Json extra = Json::object();
  if (const Json* tools = member(body, "tools"); tools && tools->is_array()) extra["tools"] = *tools;
  if (const Json* kwargs = member(body, "chat_template_kwargs"); kwargs && kwargs->is_object()) {
    for (const auto& [k, v] : kwargs->items()) extra[k] = v;
  }
  auto token_text = [&](int32_t id) { return id >= 0 ? tok_.spec().tokens[size_t(id)] : std::string(); };
  const std::string text = template_->render(chat_context(flat, flag(body, "add_generation_prompt", true),
                                                          token_text(tok_.bos_id()), token_text(tok_.eos_id()), extra));
  return tok_.encode(text, flag(body, "add_special_tokens", false), true);
}

}  // namespace moe::proxy
