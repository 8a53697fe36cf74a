// moengine placement end to end: gen-trace, plan (full and incremental), eval, compare,
// heatmap, and the errors a user sees.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_cli.h"

namespace {

using Result = moe::testing::CliResult;

std::string dir() { return moe::testing::test_dir("placement-cli"); }

Result run(const std::string& args) { return moe::testing::run_moengine("placement " + args); }

const std::string kTopo = " --nodes 2 --devices-per-node 4 --slots-per-device 9";

class PlacementCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const Result r = run("gen-trace --steps 64 --layers 4 --experts 64 --tokens 256 --skew 0.9 --correlation 0.5 --out " + dir() + "/t.npy");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  static std::string trace() { return " --trace " + dir() + "/t.npy"; }
};

TEST_F(PlacementCli, PlanEvalIncrementalCompareHeatmap) {
  Result r = run("plan" + trace() + " --window 0:32" + kTopo + " --algo eplb --out " + dir() + "/e.json");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("plan" + trace() + " --window 0:32" + kTopo + " --algo moengine --json --out " + dir() + "/m.json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto plan = nlohmann::json::parse(r.out);
  EXPECT_GT(plan["window_balance"].get<double>(), 0.0);

  r = run("eval" + trace() + " --window 32:64 --json --placement " + dir() + "/m.json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto m = nlohmann::json::parse(r.out);
  EXPECT_EQ(m["layer_balance"].size(), 4u);
  EXPECT_GT(m["balance"].get<double>(), 0.0);
  EXPECT_LE(m["balance"].get<double>(), 1.0);

  r = run("plan" + trace() + " --window 32:64" + kTopo + " --from " + dir() + "/e.json --max-moves 3 --json --out " + dir() + "/i.json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_LE(nlohmann::json::parse(r.out)["moves"].get<int64_t>(), 3);

  r = run("compare" + trace() + kTopo + " --window 16 --windows 2 --svg " + dir() + "/h.svg");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("| mean |"), std::string::npos);
  EXPECT_TRUE(std::filesystem::file_size(dir() + "/h.svg") > 1000);

  r = run("heatmap" + trace() + " --window 32:64 --before " + dir() + "/e.json --after " + dir() + "/m.json --out " + dir() + "/h2.svg");
  ASSERT_EQ(r.status, 0) << r.out;
}

TEST_F(PlacementCli, BadInputGetsAClearError) {
  Result r = run("plan" + trace() + " --window 0:32 --nodes 2 --devices-per-node 4 --slots-per-device 7 --out " + dir() + "/x.json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("cannot hold each of the 64 experts once"), std::string::npos) << r.out;
  r = run("plan" + trace() + " --window 0:99" + kTopo + " --out " + dir() + "/x.json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("within the trace's 64 steps"), std::string::npos) << r.out;
  r = run("plan" + trace() + " --window 0:32" + kTopo + " --algo greedy --out " + dir() + "/x.json");
  EXPECT_NE(r.out.find("expected eplb or moengine"), std::string::npos) << r.out;
  r = run("plan" + trace() + " --window 0:32" + kTopo + " --max-moves 3 --out " + dir() + "/x.json");
  EXPECT_NE(r.out.find("--max-moves needs --from"), std::string::npos) << r.out;
  r = run("eval --trace " + dir() + "/missing.npy --window 0:1 --placement " + dir() + "/e.json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
}

}  // namespace
