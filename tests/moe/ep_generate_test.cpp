// `moengine generate --ep N` under mpirun: greedy output and every logit equal to the
// single process's, bit for bit, on deepseek2 and qwen3moe, with the even placement and
// with redundant replicas; and the errors every rank gives for a group or placement that
// does not fit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/npy.h"
#include "ep_placements.h"
#include "core/cpu_features.h"
#include "support/mpirun.h"
#include "support/run_cli.h"

namespace moe {
namespace {

using testing::CliResult;
using testing::moengine_bin;
using testing::mpirun_moengine;
using testing::run_command;
using testing::run_moengine;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Models {
  std::string dir = testing::test_dir("ep_generate_test");
  std::string ds = dir + "/ds.gguf";
  std::string qw = dir + "/qw.gguf";
  std::string ds_q4km = dir + "/ds-q4km.gguf";
  Models() {
    EXPECT_EQ(run_moengine("gen-model --arch deepseek2 --preset tiny --type q8_0 --out " + ds).status, 0);
    EXPECT_EQ(run_moengine("gen-model --arch qwen3moe --preset tiny --type q8_0 --out " + qw).status, 0);
    EXPECT_EQ(run_moengine("gen-model --arch deepseek2 --preset tiny --type q4_K_M --out " + ds_q4km).status, 0);
  }
};

const Models& models() {
  static const Models m;
  return m;
}

const std::string kPrompt = "--prompt 'The experts are here and now' -n 24 --threads 1 --json";

// stdout (the JSON line) of a run; its logits in `logits`.
std::string generate(const std::string& model, int ranks, const std::string& logits, const std::string& extra = "") {
  const std::string args = "generate -m " + model + " " + kPrompt + " --logits-out " + logits + " " + extra;
  const CliResult r = ranks == 0 ? run_moengine(args, false) : run_command(mpirun_moengine(ranks, args + " --ep " + std::to_string(ranks)) + " 2>/dev/null");
  EXPECT_EQ(r.status, 0) << r.out;
  return r.out;
}

// extra: flags of the group's runs only; both: flags of every run.
void expect_same_as_single_process(const std::string& model, const std::string& name, const std::string& extra,
                                   std::initializer_list<int> groups, const std::string& both = "") {
  const std::string dir = models().dir;
  const std::string alone = generate(model, 0, dir + "/" + name + "-alone.npy", both);
  const auto ids = nlohmann::json::parse(alone)["output_ids"];
  ASSERT_EQ(ids.size(), 24u);
  for (const int n : groups) {
    const std::string logits = dir + "/" + name + "-ep" + std::to_string(n) + ".npy";
    const std::string out = generate(model, n, logits, extra + " " + both);
    // Rank 0 prints; the other ranks print nothing.
    EXPECT_EQ(out, alone) << "ep " << n;
    EXPECT_EQ(read_file(logits), read_file(dir + "/" + name + "-alone.npy")) << "ep " << n << ": logits differ";
  }
}

TEST(EpGenerate, DeepSeekOutputEqualsTheSingleProcess) {
  expect_same_as_single_process(models().ds, "ds", "", {1, 2, 4});
}

TEST(EpGenerate, Qwen3MoeOutputEqualsTheSingleProcess) {
  expect_same_as_single_process(models().qw, "qw", "", {1, 2, 4});
}


// Attention is data-parallel over the ranks: each stores its own sequences' KV, in any dtype.
TEST(EpGenerate, EveryKvDtypeEqualsTheSingleProcess) {
  for (const char* dtype : {"f16", "fp8_e4m3", "q8_0"}) {
    SCOPED_TRACE(dtype);
    expect_same_as_single_process(models().ds, std::string("ds-kv-") + dtype, "", {2}, std::string("--kv-cache-dtype ") + dtype);
    expect_same_as_single_process(models().qw, std::string("qw-kv-") + dtype, "", {2}, std::string("--kv-cache-dtype ") + dtype);
  }
}

std::string redundant_placement(int ranks, int moe_layers) {
  return testing::write_placement(models().dir + "/redundant-" + std::to_string(ranks) + "-" + std::to_string(moe_layers) + ".json",
                                  testing::redundant_placement(ranks, moe_layers));
}

// q4_K_M experts (q4_K gate and up; the down projections' q6_K falls back to q8_0 in the
// tiny shape): where the loader regroups, each matrix of a rank's experts and of the
// replicas it receives is regrouped on its own.
TEST(EpGenerate, MixedTypeExpertsEqualTheSingleProcess) {
  expect_same_as_single_process(models().ds_q4km, "ds-q4km", "--placement " + redundant_placement(2, 2), {2});
}

TEST(EpGenerate, RedundantReplicasGiveTheSameOutput) {
  expect_same_as_single_process(models().ds, "ds-redundant2", "--placement " + redundant_placement(2, 2), {2});
  expect_same_as_single_process(models().ds, "ds-redundant4", "--placement " + redundant_placement(4, 2), {4});
  expect_same_as_single_process(models().qw, "qw-redundant4", "--placement " + redundant_placement(4, 2), {4});
}

TEST(EpGenerate, TheExpertTraceIsTheWholeGroupsLoad) {
  const std::string dir = models().dir;
  std::string first;
  for (const int n : {1, 2, 4}) {
    const std::string trace = dir + "/trace-ep" + std::to_string(n) + ".npy";
    const std::string out = generate(models().ds, n, dir + "/trace-logits.npy", "--expert-trace-out " + trace);
    const size_t prompt = nlohmann::json::parse(out)["prompt_ids"].size();
    const NpyArray a = read_npy(trace);
    // A step per forward pass (the prompt's, then 23 decode steps), 2 MoE layers, 8 experts;
    // each token chooses 2 experts per layer.
    ASSERT_EQ(a.shape, (std::vector<int64_t>{24, 2, 8})) << "ep " << n;
    for (int64_t t = 0; t < 24; ++t) {
      for (int64_t l = 0; l < 2; ++l) {
        float sum = 0;
        for (int64_t e = 0; e < 8; ++e) sum += a.data[size_t((t * 2 + l) * 8 + e)];
        EXPECT_EQ(sum, t == 0 ? float(2 * prompt) : 2.0f) << "ep " << n << " step " << t << " layer " << l;
      }
    }
    if (n == 1) first = read_file(trace);
    EXPECT_EQ(read_file(trace), first) << "ep " << n << ": the group's trace differs from one process's";
  }
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(EpGenerate, LiveRePlacementMidRunKeepsTheOutput) {
  const std::string dir = models().dir;
  for (const auto& [model, name, ranks] : {std::tuple{models().ds, "ds", 2}, std::tuple{models().qw, "qw", 4},
                                          std::tuple{models().ds_q4km, "ds-q4km", 2}}) {
    const std::string placement =
        testing::write_placement(dir + "/lopsided-" + std::to_string(ranks) + ".json", testing::lopsided_placement(ranks, 2));
    const std::string args = "generate -m " + model + " --prompt-ids 1,2,3,4,5,6,7,8 -n 160 --ignore-eos --threads 1 --json";
    const std::string alone_logits = dir + "/" + name + "-live-alone.npy", group_logits = dir + "/" + name + "-live-group.npy";
    const CliResult alone = run_moengine(args + " --logits-out " + alone_logits, false);
    ASSERT_EQ(alone.status, 0);
    // A plan is asked for at every step 2 ms after the last: several switch in mid-run.
    const std::string log = dir + "/" + name + "-live.log";
    const CliResult group = run_command(mpirun_moengine(ranks, args + " --ep " + std::to_string(ranks) + " --placement " + placement +
                                                                    " --replace-interval-s 0.002 --replace-max-moves 4 --logits-out " +
                                                                    group_logits) +
                                        " 2>" + log);
    ASSERT_EQ(group.status, 0) << read_file(log);
    EXPECT_EQ(group.out, alone.out) << name;
    EXPECT_EQ(read_file(group_logits), read_file(alone_logits)) << name << ": logits differ";
    EXPECT_GE(count(read_file(log), "re-placement switched in"), 1) << read_file(log);
  }
}


TEST(EpGenerate, APlacementThatDoesNotFitIsAnErrorFromEveryRank) {
  const std::string args = "generate -m " + models().ds + " " + kPrompt + " --ep 2 --placement ";
  CliResult r = run_command(mpirun_moengine(2, args + redundant_placement(4, 2)) + " 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(count(r.out, "the placement is for 4 devices (1 nodes x 4) but the expert-parallel group has 2 ranks"), 2)
      << r.out;

  r = run_command(mpirun_moengine(2, args + redundant_placement(2, 3)) + " 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(count(r.out, "the placement has 3 layers but the model has 2 MoE layers"), 2) << r.out;

  const std::string broken = models().dir + "/broken.json";
  std::ofstream(broken) << R"({"nodes": 1, "devices_per_node": 2, "layers": [)";
  r = run_command(mpirun_moengine(2, args + broken) + " 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(count(r.out, broken + ":"), 2) << r.out;
}

// Replicas travel in their holder's layout, so a rank that keeps q8_0 as in the file while
// the others regroup it for the AVX-512 kernel would compute garbage from them: every rank
// refuses to start. The ranks find out together, at one collective, so mpirun may stop
// one of them (for the other's exit) before it prints: the message must appear at least once.
TEST(EpGenerate, RanksMustAgreeOnTheWeightLayout) {
  const CpuFeatures& f = cpu_features();
  if (!(f.has_avx2_fma() && f.has_avx512() && f.avx512vnni)) GTEST_SKIP() << "no AVX-512 VNNI here: no rank regroups";
  const std::string args = " " + moengine_bin() + " generate -m " + models().ds + " " + kPrompt + " --ep 2";
  const CliResult r = run_command("timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 -x MOENGINE_REGROUP=0" +
                                  args + " : -np 1" + args + " 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_GE(count(r.out, "1 of 2 ranks regroup weights for the AVX-512 kernels and the others do not"), 1) << r.out;
}

TEST(EpGenerate, TheGroupMustBeWhatMpirunStarted) {
  const std::string args = "generate -m " + models().ds + " " + kPrompt;
  CliResult r = run_moengine(args + " --ep 2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--ep 2 needs its 2 ranks started by mpirun: mpirun -np 2 moengine ... --ep 2"), std::string::npos)
      << r.out;

  r = run_command(mpirun_moengine(2, args + " --ep 3") + " 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(count(r.out, "--ep 3 but mpirun started 2 ranks"), 2) << r.out;

  r = run_moengine(args + " --placement x.json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--placement needs --ep"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moe
