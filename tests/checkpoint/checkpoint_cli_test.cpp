// Checkpoint directories through the moengine binary: gen-model --format hf, generate and
// bench model with --model DIR (and --weight-type), convert, and the errors a user sees.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/run_cli.h"

namespace moe {
namespace {

using testing::run_moengine;

std::string dir() { return testing::test_dir("checkpoint-cli"); }

class CheckpointCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const std::string& args :
         {"gen-model --preset tiny --format hf --shard-mib 1 --out " + dir() + "/hf",
          "gen-model --preset tiny --type bf16 --out " + dir() + "/twin.gguf",
          "gen-model --arch qwen3moe --preset tiny --format hf --type fp8 --out " + dir() + "/qwen-fp8"}) {
      const auto r = run_moengine(args);
      ASSERT_EQ(r.status, 0) << args << "\n" << r.out;
    }
  }

  static nlohmann::json generate(const std::string& model, const std::string& extra = "") {
    const auto r = run_moengine("generate --model " + model + " --prompt-ids 5,6,7,300 --max-tokens 6 --ignore-eos --json " + extra, false);
    EXPECT_EQ(r.status, 0) << r.out;
    return nlohmann::json::parse(r.out);
  }
};

TEST_F(CheckpointCli, GenerateFromADirectoryEqualsItsGgufTwin) {
  EXPECT_TRUE(std::filesystem::exists(dir() + "/hf/model.safetensors.index.json"));
  EXPECT_EQ(generate(dir() + "/hf"), generate(dir() + "/twin.gguf"));
  // The tokenizer comes from tokenizer.json and tokenizer_config.json.
  const std::string text = "generate --prompt 'The experts route' --max-tokens 4 --json --model ";
  const auto a = run_moengine(text + dir() + "/hf", false), b = run_moengine(text + dir() + "/twin.gguf", false);
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(nlohmann::json::parse(a.out), nlohmann::json::parse(b.out));
}

TEST_F(CheckpointCli, ConvertOutputGeneratesLikeTheLoadedCheckpoint) {
  const std::string out = dir() + "/qwen-q8_0.gguf";
  const auto r = run_moengine("convert " + dir() + "/qwen-fp8 --out " + out + " --type q8_0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(generate(out), generate(dir() + "/qwen-fp8", "--weight-type q8_0"));
  // auto: FP8 becomes q8_0, BF16 stays, the same way in both.
  const std::string auto_out = dir() + "/qwen-auto.gguf";
  ASSERT_EQ(run_moengine("convert " + dir() + "/qwen-fp8 --out " + auto_out + " --type auto").status, 0);
  EXPECT_EQ(generate(auto_out), generate(dir() + "/qwen-fp8"));
  EXPECT_TRUE(generate(dir() + "/qwen-fp8", "--weight-type fp8")["output_ids"].is_array());
}

TEST_F(CheckpointCli, BenchModelTakesADirectory) {
  const auto r = run_moengine("bench model --model " + dir() + "/qwen-fp8 --weight-type fp8 --pp 8 --tg 2 --reps 1 --json", false);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(nlohmann::json::parse(r.out).contains("model"));
}

TEST_F(CheckpointCli, ErrorsAreOneLine) {
  auto r = run_moengine("generate --model " + dir() + "/twin.gguf --weight-type q8_0 --prompt-ids 1 --max-tokens 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: " + dir() + "/twin.gguf: --weight-type q8_0 applies to Hugging Face checkpoint directories"),
            std::string::npos)
      << r.out;
  r = run_moengine("convert " + dir() + "/hf --out " + dir() + "/x.gguf --type fp8");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --type fp8: GGUF has no FP8 block type"), std::string::npos) << r.out;
  r = run_moengine("gen-model --format hf --type q8_0 --out " + dir() + "/bad");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: --format hf writes --type bf16 or fp8, not 'q8_0'"), std::string::npos) << r.out;
  r = run_moengine("generate --model " + dir() + "/nothing-here --prompt-ids 1 --max-tokens 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moe
