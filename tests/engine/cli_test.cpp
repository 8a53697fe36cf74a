// The moengine binary end to end: gen-model, generate --json / --logits-out, and the
// errors a user sees for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/npy.h"
#include "support/run_cli.h"

namespace moe {
namespace {

using Result = testing::CliResult;

std::string tmp() { return testing::test_dir("cli"); }

Result run(const std::string& args, bool with_stderr = true) { return testing::run_moengine(args, with_stderr); }

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = tmp() + "/cli-tiny.gguf";
    const Result r = run("gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + model_);
    ASSERT_EQ(r.status, 0) << r.out;
  }
  static std::string model_;
};
std::string Cli::model_;

TEST_F(Cli, GenerateJsonHasPromptOutputAndText) {
  const Result r = run("generate --model " + model_ + " --prompt-ids 1,2,3 --max-tokens 6 --ignore-eos --json", false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({1, 2, 3}));
  ASSERT_EQ(j["output_ids"].size(), 6u);
  EXPECT_TRUE(j["text"].is_string());
  // Greedy decoding is deterministic.
  const Result again = run("generate --model " + model_ + " --prompt-ids 1,2,3 --max-tokens 6 --ignore-eos --json", false);
  EXPECT_EQ(nlohmann::json::parse(again.out)["output_ids"], j["output_ids"]);
}

TEST_F(Cli, LogitsOutHasOneRowPerConsumedToken) {
  const std::string npy = tmp() + "/logits.npy";
  const Result r = run("generate --model " + model_ + " --prompt-ids 4,5,6,7 --max-tokens 3 --ignore-eos --json --logits-out " + npy, false);
  ASSERT_EQ(r.status, 0) << r.out;
  const NpyArray a = read_npy(npy);
  ASSERT_EQ(a.shape.size(), 2u);
  EXPECT_EQ(a.shape[0], 4 + 3 - 1);
  EXPECT_EQ(a.shape[1], 512);
  // The greedy tokens are the argmax of the last prompt row and of each decode row.
  const auto ids = nlohmann::json::parse(r.out)["output_ids"];
  for (int i = 0; i < 3; ++i) {
    const float* row = a.data.data() + (3 + i) * a.shape[1];
    EXPECT_EQ(std::max_element(row, row + a.shape[1]) - row, ids[size_t(i)].get<int>());
  }
}

TEST_F(Cli, BadInputIsAClearError) {
  Result r = run("generate --model " + model_ + " --prompt-ids 1,99999");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("token id 99999 is outside the vocabulary (0..511)"), std::string::npos) << r.out;
  r = run("generate --model " + model_ + " --prompt-ids 1,x");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--prompt-ids: 'x' is not an integer"), std::string::npos) << r.out;
  r = run("generate --model /nonexistent.gguf --prompt-ids 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("/nonexistent.gguf: cannot open"), std::string::npos) << r.out;
  r = run("gen-model --arch llama --out /tmp/x.gguf");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--arch 'llama' is not supported"), std::string::npos) << r.out;
}

TEST_F(Cli, BenchModelReportsRates) {
  const Result r = run("bench model --model " + model_ + " --pp 16 --tg 4 --reps 1 --json", false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["pp_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["tg_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["memory_bandwidth_gbps"].get<double>(), 0.0);
  EXPECT_GT(j["decode_roofline_fraction"].get<double>(), 0.0);
  // A tiny model's weights would be read from the caches: only the 1 GiB buffer is measured.
  EXPECT_FALSE(j.contains("step_weights_bandwidth_gbps"));
  EXPECT_FALSE(j.contains("batched_decode"));
}

TEST_F(Cli, BenchModelMeasuresBatchedDecode) {
  const Result r = run("bench model --model " + model_ + " --pp 8 --tg 3 --reps 1 --batch 1,3 --batch-context 5 --json", false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["batched_decode"].size(), 2u);
  EXPECT_EQ(j["batched_decode"][0]["batch"], 1);
  EXPECT_EQ(j["batched_decode"][1]["batch"], 3);
  EXPECT_EQ(j["batched_decode"][1]["context"], 5);
  EXPECT_GT(j["batched_decode"][1]["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["batched_decode"][1]["step_ms"].get<double>(), 0.0);

  const Result bad = run("bench model --model " + model_ + " --batch 4,0");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--batch sizes must be at least 1, got 0"), std::string::npos) << bad.out;
}

constexpr double kTinyLayers = 3;

TEST_F(Cli, BenchModelMeasuresDecodeAtDepthWithItsKvBytes) {
  const Result r =
      run("bench model --model " + model_ + " --pp 8 --tg 3 --reps 1 --context 40,700 --kv-cache-dtype q8_0 --json", false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache_dtype"], "q8_0");
  ASSERT_EQ(j["decode_at_depth"].size(), 2u);
  EXPECT_EQ(j["decode_at_depth"][1]["context"], 700);
  EXPECT_GT(j["decode_at_depth"][1]["tokens_per_s"].get<double>(), 0.0);
  // A tiny deepseek2 row (latent 64 + rope 32) in q8_0: 3 blocks of 32 int8 and an f16 scale.
  const double extra = j["decode_at_depth"][1]["bytes_per_token"].get<double>() - j["decode_at_depth"][0]["bytes_per_token"].get<double>();
  EXPECT_NEAR(extra, 660 * kTinyLayers * 3 * 34, 1.0);
  const Result bad = run("bench model --model " + model_ + " --context 4090");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--context 4090: 4090 + 128 decoded tokens is more than the model's context length (4096)"), std::string::npos)
      << bad.out;
}

TEST_F(Cli, SpeculativeDecodingKeepsTheOutputAndSaysWhatItRefuses) {
  const std::string mtp_model = tmp() + "/cli-tiny-mtp.gguf";
  ASSERT_EQ(run("gen-model --arch deepseek2 --preset tiny --type q8_0 --nextn-layers 1 --out " + mtp_model).status, 0);
  const std::string gen = " --prompt-ids 1,2,3,1,2,3,1,2 --max-tokens 24 --ignore-eos --json";
  const Result plain = run("generate --model " + mtp_model + gen, false);
  ASSERT_EQ(plain.status, 0) << plain.out;
  for (const std::string& spec : {R"('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}')",
                                  R"('{"method": "mtp", "num_speculative_tokens": 2}')"}) {
    const Result r = run("generate --model " + mtp_model + gen + " --speculative-config " + spec);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("speculative decoding ("), std::string::npos) << r.out;
    const std::string json = r.out.substr(r.out.find("{\"prompt_ids\""));
    EXPECT_EQ(nlohmann::json::parse(json)["output_ids"], nlohmann::json::parse(plain.out)["output_ids"]) << spec;
  }
  const Result bench = run("bench model --model " + mtp_model + " --pp 8 --tg 8 --reps 1 --json --speculative-config "
                           R"('{"method": "mtp", "num_speculative_tokens": 2}' --draft-acceptance 1)", false);
  ASSERT_EQ(bench.status, 0) << bench.out;
  const auto j = nlohmann::json::parse(bench.out)["speculative"];
  EXPECT_EQ(j["with_drafts"]["accepted_tokens"], j["with_drafts"]["drafted_tokens"]);
  EXPECT_NEAR(j["with_drafts"]["tokens_per_step"].get<double>(), 3.0, 0.5);
  // Several requests decoded together: every one's tokens counted, steps per request.
  const Result streams = run("bench model --model " + mtp_model + " --pp 8 --tg 8 --reps 1 --json --speculative-streams 4 --speculative-config "
                             R"('{"method": "mtp", "num_speculative_tokens": 2}' --draft-acceptance 1)", false);
  ASSERT_EQ(streams.status, 0) << streams.out;
  const auto s4 = nlohmann::json::parse(streams.out)["speculative"];
  EXPECT_EQ(s4["streams"], 4);
  EXPECT_EQ(s4["without_drafts"]["tokens"], 4 * 8);
  // Timed until the first request has its 8: the last step may take each up to 2 past.
  EXPECT_GE(s4["with_drafts"]["tokens"], 4 * 8);
  EXPECT_LE(s4["with_drafts"]["tokens"], 4 * (8 + 2));
  EXPECT_EQ(s4["with_drafts"]["accepted_tokens"], s4["with_drafts"]["drafted_tokens"]);
  EXPECT_NEAR(s4["with_drafts"]["tokens_per_step"].get<double>(), 3.0, 0.5);
  EXPECT_DOUBLE_EQ(s4["without_drafts"]["tokens_per_step"].get<double>(), 1.0);
  // Prompts followed by their own continuation: same counts, longer prompts.
  const Result echo = run("bench model --model " + mtp_model + " --pp 8 --tg 8 --reps 1 --json --speculative-prompt-echo 24 --speculative-config "
                          R"('{"method": "ngram", "num_speculative_tokens": 2}')", false);
  ASSERT_EQ(echo.status, 0) << echo.out;
  const auto e = nlohmann::json::parse(echo.out)["speculative"];
  EXPECT_EQ(e["prompt_tokens"], 8 + 24);
  EXPECT_GE(e["with_drafts"]["tokens"], 8);
  EXPECT_LE(e["with_drafts"]["tokens"], 8 + 2);

  Result bad = run("generate --model " + model_ + gen + R"( --speculative-config '{"method": "mtp", "num_speculative_tokens": 1}')");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("needs the model's MTP layer, and the file has none"), std::string::npos) << bad.out;
  bad = run("generate --model " + model_ + gen + R"( --speculative-config '{"method": "ngram"}')");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("num_speculative_tokens is required"), std::string::npos) << bad.out;
  bad = run("serve --model " + mtp_model + R"( --role prefill --speculative-config '{"method": "ngram", "num_speculative_tokens": 1}')");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("a prefill instance does not decode, so it drafts nothing with method ngram"), std::string::npos) << bad.out;
  bad = run("gen-model --arch qwen3moe --preset tiny --nextn-layers 1 --out " + tmp() + "/x.gguf");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("--nextn-layers: MTP layers are written for deepseek2 only"), std::string::npos) << bad.out;
  bad = run("bench model --model " + model_ + " --speculative-prompt-echo 8");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("--speculative-prompt-echo needs --speculative-config"), std::string::npos) << bad.out;
  bad = run("bench model --model " + model_ + " --draft-acceptance 0.5");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("--draft-acceptance needs --speculative-config"), std::string::npos) << bad.out;
}

TEST_F(Cli, BenchKvAccuracyComparesEachDtypeWithF32) {
  const Result r = run("bench kv-accuracy --model " + model_ + " --prompt-len 300 --gen 8 --dtypes bf16,q8_0 --json", false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["positions"], 307);
  ASSERT_EQ(j["dtypes"].size(), 2u);
  EXPECT_EQ(j["dtypes"][0]["dtype"], "bf16");
  for (const auto& d : j["dtypes"]) {
    // Rounding the cache moves the distributions a little: measurably, never below zero.
    EXPECT_GT(d["kl_mean"].get<double>(), 0.0) << d.dump();
    EXPECT_GE(d["kl_p99"].get<double>(), 0.0);
    EXPECT_GE(d["kl_max"].get<double>(), d["kl_p99"].get<double>());
    EXPECT_GT(d["top1_agreement"].get<double>(), 0.5);
    EXPECT_LE(d["top1_agreement"].get<double>(), 1.0);
    EXPECT_LE(d["greedy_tokens_equal"].get<int>(), 8);
  }
  const Result bad = run("bench kv-accuracy --model " + model_ + " --dtypes f32");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--dtypes: 'f32' is not one of f16, bf16, fp8_e4m3, q8_0"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace moe
