// proxy_overhead_bench in a tiny mode: it starts its stub, nginx and moengine's proxy,
// measures all four targets, and reports latency and a held rate for each; the unified
// proxy relays in one hop, the P/D proxy in two legs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_cli.h"

namespace {

constexpr const char* kNginx = "/usr/sbin/nginx";

TEST(ProxyOverheadBench, TinyRunReportsEveryTarget) {
  if (access(kNginx, X_OK) != 0) {
    GTEST_SKIP() << kNginx << " is missing: the benchmark's peer is Debian's nginx (apt-get install nginx-light, "
                 << "as scripts/setup.sh does)";
  }
  const std::string json_path = moe::testing::test_dir("proxy-overhead-bench") + "/result.json";
  // A loose p99 bound: ctest may run other tests on the same cores.
  const moe::testing::CliResult r = moe::testing::run_command(
      std::string(PROXY_OVERHEAD_BENCH) + " --nginx " + kNginx +
      " --requests 20 --warmup-requests 5 --duration-s 0.2 --warmup-s 0.05 --concurrency 1,4 --p99-bound-ms 5000" +
      " --ab-blocks 2 --ab-block-requests 100 --ab-poll-ms 10 --json " +
      json_path + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("Added latency over direct"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Highest request rate held"), std::string::npos) << r.out;

  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_NE(j["peer"].get<std::string>().find("nginx/"), std::string::npos) << j["peer"];
  const nlohmann::json& targets = j["targets"];
  ASSERT_EQ(targets.size(), 5u) << j.dump(2);
  const std::vector<std::pair<std::string, double>> expected{
      {"direct (stub)", 1}, {"nginx", 1}, {"moengine unified", 1}, {"moengine P/D", 2}, {"unified+dashboard", 1}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const nlohmann::json& t = targets[i];
    const auto& [name, legs] = expected[i];
    EXPECT_EQ(t["name"], name);
    for (const char* kind : {"whole", "streamed"}) {
      SCOPED_TRACE(name + " " + kind);
      const nlohmann::json& k = t[kind];
      EXPECT_EQ(k["latency"]["answers"], 20);
      EXPECT_EQ(k["latency"]["errors"], 0);
      EXPECT_GT(k["latency"]["p50_ms"].get<double>(), 0);
      EXPECT_GT(k["max_rate_held"].get<double>(), 0);
      EXPECT_EQ(k["ramp"].size(), 2u);
      EXPECT_DOUBLE_EQ(k["latency"]["legs_per_request"].get<double>(), legs);
      for (const nlohmann::json& step : k["ramp"]) EXPECT_DOUBLE_EQ(step["legs_per_request"].get<double>(), legs);
    }
  }
  // The dashboard A/B pass: the state was polled during the polled blocks, and every pool
  // has its added latency.
  const nlohmann::json& ab = j["dashboard_ab"];
  EXPECT_EQ(ab["blocks"], 2);
  EXPECT_EQ(ab["block_requests"], 100);
  for (const char* kind : {"whole", "streamed"}) {
    SCOPED_TRACE(kind);
    EXPECT_GT(ab[kind]["polls"].get<int64_t>(), 0);
    for (const char* f : {"polled_added_p50_ms", "quiet_added_p50_ms", "quiet_half_a_added_p50_ms", "quiet_half_b_added_p50_ms"}) {
      EXPECT_TRUE(ab[kind][f].is_number()) << f;
    }
  }
  EXPECT_NE(r.out.find("Dashboard A/B: one unified proxy"), std::string::npos) << r.out;
}

}  // namespace
