// moengine sim end to end: a run on a model file's metadata with the JSON keys the docs
// promise, a sweep with its best configuration and charts, and the errors a user sees.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_cli.h"

namespace {

using Result = moe::testing::CliResult;

std::string dir() { return moe::testing::test_dir("sim-cli"); }

std::string write(const std::string& name, const std::string& text) {
  const std::string path = dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

const char* kDeployment = R"(hardware: h100-sxm
model: {gguf: tiny.gguf}
deployment:
  prefill: {instances: 2, devices: 2, max_batched_tokens: 512}
  decode: {instances: 1, devices: 2, max_sequences_per_device: 16}
  policy: cost
workload:
  arrival: {poisson: 200}
  prompt_tokens: {uniform: [32, 256]}
  output_tokens: {fixed: 16}
  prefix_hit_rate: 0.25
  duration_s: 2
slo: {ttft_s: 0.5, tpot_s: 0.01}
)";

class SimCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const Result r = moe::testing::run_moengine("gen-model --arch deepseek2 --preset tiny --out " + dir() + "/tiny.gguf");
    ASSERT_EQ(r.status, 0) << r.out;
  }
};

TEST_F(SimCli, RunReadsTheModelFileAndWritesTheDocumentedKeys) {
  const std::string config = write("pd.yaml", kDeployment);
  const Result r = moe::testing::run_moengine("sim --config " + config + " --json " + dir() + "/pd.json --svg " + dir() + "/svg");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("prefill in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode out"), std::string::npos) << r.out;
  std::ifstream in(dir() + "/pd.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const char* key : {"devices", "input_tokens_per_s", "input_tokens_per_s_per_device", "input_tokens_per_s_per_node",
                          "utilisation"})
    EXPECT_TRUE(j["prefill"].contains(key)) << key;
  for (const char* key : {"devices", "output_tokens_per_s", "output_tokens_per_s_per_device", "output_tokens_per_s_per_node",
                          "tokens_per_s_per_user", "utilisation"})
    EXPECT_TRUE(j["decode"].contains(key)) << key;
  for (const char* block : {"ttft_s", "tpot_s"})
    for (const char* p : {"p50", "p90", "p99"}) EXPECT_TRUE(j[block].contains(p)) << block << "." << p;
  EXPECT_TRUE(j.contains("goodput_rps"));
  EXPECT_EQ(j["prefill"]["devices"], 4);
  const int64_t arrived = j["requests"]["arrived"], completed = j["requests"]["completed"], rejected = j["requests"]["rejected"];
  EXPECT_GT(arrived, 200);
  EXPECT_EQ(completed + rejected, arrived);
  EXPECT_EQ(j["at_end"]["stalled_requests"], 0);
  // 200 requests/s of 144 tokens on average for about 2 s: the input the prefill pool saw.
  EXPECT_NEAR(j["prefill"]["input_tokens_per_s"].get<double>(), 200 * 144, 200 * 144 * 0.25);
  EXPECT_TRUE(std::filesystem::file_size(dir() + "/svg/ttft.svg") > 1000);
}

TEST_F(SimCli, SweepPrintsTheBestPerDeviceAndDrawsCharts) {
  const std::string config = write("sweep.yaml", kDeployment);
  const Result r = moe::testing::run_moengine("sim sweep --config " + config +
                                              " --vary deployment.decode.instances=1,2 --vary workload.arrival.poisson=50,400"
                                              " --json " + dir() + "/sweep.json --svg " + dir() + "/sweep");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("best under the SLOs, per device: deployment.decode.instances="), std::string::npos) << r.out;
  std::ifstream in(dir() + "/sweep.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["runs"][2]["values"], nlohmann::json::array({"2", "50"}));
  EXPECT_EQ(j["runs"][2]["decode"]["devices"], 4);
  EXPECT_TRUE(std::filesystem::file_size(dir() + "/sweep/goodput.svg") > 1000);
  EXPECT_TRUE(std::filesystem::file_size(dir() + "/sweep/latency.svg") > 1000);
}

TEST_F(SimCli, CalibratesAProfileFromBenchModelThatSimReads) {
  const std::string model = dir() + "/tiny.gguf", bench = dir() + "/bench.json";
  Result r = moe::testing::run_command(moe::testing::moengine_bin() + " bench model --model " + model +
                                       " --pp 32 --tg 8 --reps 1 --threads 1 --batch 1,4 --batch-context 16 --json > " + bench +
                                       " 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  const std::string profile = dir() + "/profiles/hardware/cpu-test.yaml";
  r = moe::testing::run_moengine("sim calibrate --model " + model + " --bench " + bench + " --out " + profile);
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* row : {"pp32", "tg8", "batch 1 @ 16", "batch 4 @ 16", "rms log error", "GEMMs"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  r = moe::testing::run_moengine("sim calibrate --model " + model + " --print-precision");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string precision = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(precision, "{weights: f32, activations: f32, kv_cache: bf16}");
  const std::string config = write("cpu.yaml", "hardware: cpu-test\nmodel: {gguf: tiny.gguf}\nprecision: " + precision +
                                                   "\ndeployment:\n  unified: {instances: 1, devices: 1, kv_cache_gib: 1}\n"
                                                   "workload:\n  arrival: {closed: 2}\n  prompt_tokens: {fixed: 32}\n"
                                                   "  output_tokens: {fixed: 8}\n  requests: 6\n");
  r = moe::testing::run_command("MOENGINE_SIM_PROFILES=" + dir() + "/profiles " + moe::testing::moengine_bin() + " sim --config " +
                                config + " --json - 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests"]["completed"], 6);
  EXPECT_GT(j["unified"]["output_tokens_per_s"].get<double>(), 0);
  r = moe::testing::run_moengine("sim calibrate --model " + model + " --bench " + config);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("cpu.yaml: not valid JSON"), std::string::npos) << r.out;
  r = moe::testing::run_moengine("sim calibrate --model " + model + " --bench " + write("empty.json", "{}"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("empty.json: not a `moengine bench model --json` result: no number `threads`"), std::string::npos) << r.out;
}

TEST_F(SimCli, BadInputGetsAClearError) {
  std::string text = kDeployment;
  text.replace(text.find("policy: cost"), 12, "policy: fastest");
  Result r = moe::testing::run_moengine("sim --config " + write("bad.yaml", text));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("bad.yaml:6:11: deployment.policy: unknown routing policy 'fastest'"), std::string::npos) << r.out;
  r = moe::testing::run_moengine("sim --config " + dir() + "/missing.yaml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("missing.yaml: cannot open the simulation config"), std::string::npos) << r.out;
  r = moe::testing::run_moengine("sim sweep --config " + write("ok.yaml", kDeployment) + " --vary deployment.decode.instances");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("expected KEY=V1,V2"), std::string::npos) << r.out;
}

}  // namespace
