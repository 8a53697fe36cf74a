// The tokenizer through the moengine binary: `tokenize` on a tokenizer.json and on a GGUF
// that gen-model made with the same real vocabulary, `generate --prompt` encoding with the
// model's own tokenizer, chat rendering, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "js_reference.h"

namespace moe {
namespace {

struct Run {
  int status;
  std::string out;
};

Run run(const std::string& args) {
  const std::string cmd = std::string(std::getenv("MOENGINE_BIN")) + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  return {pclose(p), out};
}

nlohmann::json run_json(const std::string& args) {
  const Run r = run(args);
  EXPECT_EQ(r.status, 0) << args;
  return nlohmann::json::parse(r.out);
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string missing = test::reference_missing();
    ASSERT_TRUE(missing.empty()) << missing;
    ASSERT_NE(std::getenv("MOENGINE_BIN"), nullptr);
    dir_ = std::filesystem::path(std::getenv("MOENGINE_TEST_TMP") ? std::getenv("MOENGINE_TEST_TMP") : "/tmp") / "tokenize_cli";
    std::filesystem::create_directories(dir_);
    json_ = test::reference_model_dir("tokenizer-deepseek_v3") + "/tokenizer.json";
  }
  std::filesystem::path dir_;
  std::string json_;
};

TEST_F(TokenizeCli, GgufFromGenModelMatchesTokenizerJsonAndDrivesGenerate) {
  const std::string model = (dir_ / "tiny-deepseek-vocab.gguf").string();
  ASSERT_EQ(run("gen-model --arch deepseek2 --preset tiny --layers 1 --tokenizer '" + json_ + "' --out '" + model + "'").status, 0);
  const std::string text = "'Hello, world! 你好 12345 <｜User｜>hi'";
  const nlohmann::json from_json = run_json("tokenize --tokenizer '" + json_ + "' --json --text " + text);
  const nlohmann::json from_gguf = run_json("tokenize --tokenizer '" + model + "' --json --text " + text);
  EXPECT_EQ(from_json["ids"], from_gguf["ids"]);
  const auto ids = from_json["ids"].get<std::vector<int32_t>>();
  EXPECT_NE(std::find(ids.begin(), ids.end(), 128803), ids.end());  // <｜User｜>, matched as a special token

  // generate encodes --prompt with the file's tokenizer and adds BOS (add_bos_token).
  const nlohmann::json gen = run_json("generate --model '" + model + "' --prompt " + text + " --max-tokens 2 --json");
  std::vector<int32_t> want{0};
  for (const auto& id : from_json["ids"]) want.push_back(id.get<int32_t>());
  EXPECT_EQ(gen["prompt_ids"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(gen["output_ids"].size(), 2u);
}

TEST_F(TokenizeCli, DecodeChatAndErrors) {
  const nlohmann::json enc = run_json("tokenize --tokenizer '" + json_ + "' --json --text 'naïve café'");
  std::string ids;
  for (const auto& id : enc["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  EXPECT_EQ(run_json("tokenize --tokenizer '" + json_ + "' --json --decode " + ids)["text"], "naïve café");

  const std::string chat = (dir_ / "chat.json").string();
  std::ofstream(chat) << R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])";
  const nlohmann::json c = run_json("tokenize --tokenizer '" + json_ + "' --json --add-generation-prompt --chat '" + chat + "'");
  EXPECT_EQ(c["prompt"], "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>");
  EXPECT_EQ(c["ids"].front(), 0);

  EXPECT_NE(run("tokenize --tokenizer '" + json_ + "' --decode 99999999").status, 0);
  EXPECT_NE(run("tokenize --tokenizer /nonexistent/tokenizer.json --text x").status, 0);
}

}  // namespace
}  // namespace moe
