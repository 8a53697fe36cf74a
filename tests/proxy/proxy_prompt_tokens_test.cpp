// The proxy's prompt tokenization equals the instances' own: token for token against a
// `moengine serve`'s POST /tokenize, for completion text, chat messages of string and part
// contents, with and without the generation prompt and special tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "proxy/prompt_tokens.h"
#include "support/http_calls.h"
#include "support/run_cli.h"
#include "support/serve_process.h"

namespace moe::proxy {
namespace {

std::string dir() { return moe::testing::test_dir("proxy_prompt_tokens"); }

std::string model() {
  const std::string path = dir() + "/tiny.gguf";
  if (!std::filesystem::exists(path)) {
    const moe::testing::CliResult r = moe::testing::run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + path);
    if (r.status != 0) throw std::runtime_error(r.out);
  }
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(PromptTokens, EqualTheInstancesTokenization) {
  const std::string chat_template = std::string(MOE_SERVER_TEST_DIR) + "/synthetic_chat_template.jinja";
  moe::testing::ServeProcess serve({"--model", model(), "--port", "0", "--served-model-name", "tiny", "--kv-cache-memory", "0.02",
                                    "--chat-template", chat_template},
                                   dir() + "/serve.log");
  ASSERT_FALSE(serve.url().empty()) << serve.log();
  const PromptTokenizer tok(model(), read(chat_template));
  const std::vector<std::pair<Api, Json>> bodies = {
      {Api::kCompletion, {{"prompt", "The experts of a mixture route every token"}}},
      {Api::kCompletion, {{"prompt", "No BOS here"}, {"add_special_tokens", false}}},
      {Api::kChat, {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello there"}}}}}},
      {Api::kChat,
       {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "part one"}}, {{"type", "text"}, {"text", "two"}}}}}}}}},
      {Api::kChat, {{"messages", {{{"role", "user"}, {"content", "no prompt after"}}}}, {"add_generation_prompt", false}}},
  };
  for (const auto& [api, body] : bodies) {
    Json ask = body;
    ask["model"] = "tiny";
    const moe::testing::Reply r = moe::testing::post_json(serve.url(), "/tokenize", ask);
    ASSERT_EQ(r.status, 200) << r.body;
    const std::optional<std::vector<int32_t>> ids = tok.tokens(api, body);
    ASSERT_TRUE(ids) << body.dump();
    EXPECT_EQ(Json(*ids), r.json()["tokens"]) << body.dump();
  }
  // What /tokenize does not take: token ids (used as they are) and a one-element list.
  EXPECT_EQ(tok.tokens(Api::kCompletion, {{"prompt", {5, 17, 300, 2}}}), (std::vector<int32_t>{5, 17, 300, 2}));
  EXPECT_EQ(tok.tokens(Api::kCompletion, {{"prompt", {"a one-element list"}}}), tok.tokens(Api::kCompletion, {{"prompt", "a one-element list"}}));
  EXPECT_FALSE(tok.tokens(Api::kChat, {{"messages", Json::array()}}));
  EXPECT_FALSE(tok.tokens(Api::kCompletion, {{"prompt", {1, -2}}}));
  EXPECT_FALSE(tok.tokens(Api::kChat, {{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}));
}

}  // namespace
}  // namespace moe::proxy
