// The real DeepSeek-V3 and Qwen3 chat templates (from the models' tokenizer_config.json),
// rendered by moengine and by @huggingface/jinja over a set of conversations: system
// prompts, multi-turn, tools and tool calls, reasoning, generation prompt on and off.
#include <gtest/gtest.h>

#include "js_reference.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace moe {
namespace {

TEST(ChatTemplateConformance, RendersLikeHuggingFaceJinja) {
  const std::string missing = test::reference_missing();
  ASSERT_TRUE(missing.empty()) << missing;
  const nlohmann::ordered_json ref = test::run_reference("chat");
  const TokenizerSpec deepseek = read_hf_tokenizer_spec(test::reference_model_dir("tokenizer-deepseek_v3") + "/tokenizer.json");
  const TokenizerSpec qwen = read_hf_tokenizer_spec(test::reference_model_dir("tokenizer-qwen3") + "/tokenizer.json");
  const ChatTemplate templates[] = {ChatTemplate(deepseek.chat_template), ChatTemplate(qwen.chat_template)};

  size_t per_template[2] = {0, 0};
  ASSERT_GE(ref["chats"].size(), 20u);
  for (const auto& c : ref["chats"]) {
    const int which = c["template"] == "deepseek_v3" ? 0 : 1;
    ++per_template[which];
    std::string got;
    ASSERT_NO_THROW(got = templates[which].render(c["context"])) << c["name"];
    EXPECT_EQ(got, c["text"].get<std::string>()) << c["template"] << " / " << c["name"];
  }
  EXPECT_GE(per_template[0], 10u);
  EXPECT_GE(per_template[1], 10u);
}

}  // namespace
}  // namespace moe
