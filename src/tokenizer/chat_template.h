#pragma once
// Renders a model's own chat template (Jinja, from tokenizer_config.json or the GGUF key
// tokenizer.chat_template) the way transformers' apply_chat_template does, so the prompt
// is byte-identical to what the model was trained with. The supported subset covers the
// DeepSeek-V3/R1 and Qwen2.5/Qwen3 templates (and most others); a construct outside it is
// a moe::Error naming the construct and the template line, never a silently wrong prompt.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace moe {

namespace jinja {
struct Node;
}

class ChatTemplate {
 public:
  // Parses the template; throws moe::Error on a syntax error or unsupported statement.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // context holds the template's variables: messages, add_generation_prompt, tools,
  // bos_token, eos_token, enable_thinking, ... (key order is kept: tojson prints it).
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::unique_ptr<std::vector<std::unique_ptr<jinja::Node>>> body_;
};

// The context apply_chat_template builds: messages, add_generation_prompt, the special
// token strings, and `extra` (tools, enable_thinking, ...) on top.
nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const std::string& bos_token, const std::string& eos_token,
                                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace moe
