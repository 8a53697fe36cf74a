// The simulator routes with the proxy's own policies and places experts with the real
// planner: a swapped-in policy changes routing as the proxy's tests expect, and redundant
// experts lower the MoE step by the planner's balance figure.
#include <gtest/gtest.h>

#include "sim/cost_model.h"
#include "sim/expert_balance.h"
#include "sim/simulator.h"
#include "sim_files.h"

namespace moe::sim {
namespace {

using testing::kToyHardware;
using testing::kToyModel;
using testing::write_config;

// Three single-rank unified instances; requests far enough apart that each ends before the
// next arrives, two shared-prefix groups of 256 tokens ahead of short prompts of their own.
SimConfig three_instances(const std::string& policy) {
  const std::string text = std::string(kToyHardware) + kToyModel + R"(
deployment:
  unified: {instances: 3, devices: 1, max_sequences_per_device: 8, block_size: 16}
  policy: )" + policy + R"(
workload:
  arrival: {poisson: 20}
  prompt_tokens: {uniform: [20, 60]}
  output_tokens: {fixed: 8}
  shared_prefix: {groups: 2, tokens: 256}
  requests: 30
  seed: 5
)";
  return read_config(write_config("three_" + policy + ".yaml", text), {});
}

TEST(SimPolicy, RoundRobinTakesTheInstancesInTurn) {
  const SimResult r = simulate(three_instances("round_robin"));
  ASSERT_EQ(r.requests.size(), 30u);
  for (const SimRequest& q : r.requests) EXPECT_EQ(q.prefill_view, q.id % 3) << q.id;
  EXPECT_EQ(r.routing.at("whole/round_robin"), 30);
}

TEST(SimPolicy, CacheAwareSendsAGroupToTheInstanceHoldingItsPrefix) {
  const SimResult r = simulate(three_instances("cache_aware"));
  std::map<int32_t, int32_t> home;  // group -> the instance its first request went to
  int64_t sticky = 0;
  for (const SimRequest& q : r.requests) {
    ASSERT_LT(q.first_token_s, r.requests.back().spec.arrival_s + 1) << "requests were meant to run one at a time";
    const auto [it, first] = home.emplace(q.spec.prefix_group, q.prefill_view);
    if (!first) {
      EXPECT_EQ(q.prefill_view, it->second) << "request " << q.id << " of group " << q.spec.prefix_group;
      ++sticky;
    }
  }
  EXPECT_GT(sticky, 20);
  // The prefix was in the instance's cache (from its KV events), which is what the policy
  // matched on: every request after its group's first one is a prefix match.
  EXPECT_EQ(r.routing.at("whole/prefix_match"), sticky);
  // The same traffic under round robin spreads each group over the instances.
  const SimResult rr = simulate(three_instances("round_robin"));
  std::map<int32_t, std::set<int32_t>> spread;
  for (const SimRequest& q : rr.requests) spread[q.spec.prefix_group].insert(q.prefill_view);
  for (const auto& [group, views] : spread) EXPECT_EQ(views.size(), 3u) << group;
}

TEST(SimPolicy, RedundantExpertsLowerTheMoeStepByThePlannersBalance) {
  for (const char* planner : {"moengine", "eplb"}) {
    SCOPED_TRACE(planner);
    auto config_with = [&](int redundant) {
      const std::string text = std::string(kToyHardware) + kToyModel + R"(
deployment:
  prefill: {devices: 4, placement: )" + planner + ", redundant_experts: " + std::to_string(redundant) + R"(}
  decode: {devices: 4}
workload:
  arrival: {poisson: 1}
  expert_load: {skew: 1.2}
  duration_s: 1
)";
      return read_config(write_config("balance.yaml", text), {});
    };
    const SimConfig without = config_with(0), with = config_with(4);
    const ExpertBalance b0 = expert_balance(without.model, *without.deployment.prefill, 4, "", 1.2, 4096, 1);
    const ExpertBalance b1 = expert_balance(with.model, *with.deployment.prefill, 4, "", 1.2, 4096, 1);
    EXPECT_GT(b1.balance, b0.balance);
    const CostModel c0(without, *without.deployment.prefill, Phase::prefill, b0.imbalance);
    const CostModel c1(with, *with.deployment.prefill, Phase::prefill, b1.imbalance);
    // A batch large enough that the experts are compute-bound on every device.
    std::vector<RankBatch> batch(4);
    for (RankBatch& rank : batch) c0.add_sequence(rank, 4096, 0, true);
    const double t0 = c0.step(batch).experts, t1 = c1.step(batch).experts;
    EXPECT_NEAR(t0 / t1, b1.balance / b0.balance, 1e-9 * t0 / t1);
  }
}

}  // namespace
}  // namespace moe::sim
