// moengine's planner and incremental mode: every placement valid, never worse than EPLB on
// the window it plans from, redundancy spent where the skew is, move limits held.
#include <gtest/gtest.h>

#include "core/error.h"

#include <algorithm>
#include <numeric>

#include "placement/eplb.h"
#include "placement/forecast.h"
#include "placement/incremental.h"
#include "placement/metrics.h"
#include "placement/moengine_planner.h"
#include "placement/trace_gen.h"

namespace moe::placement {
namespace {

struct Case {
  Topology topo;
  double skew;
  uint64_t seed;
};

Trace small_trace(double skew, uint64_t seed, int64_t experts = 32, int64_t layers = 6) {
  TraceGenOptions o;
  o.steps = 48;
  o.layers = layers;
  o.experts = experts;
  o.top_k = 4;
  o.tokens = 256;
  o.skew = skew;
  o.skew_spread = 0.8;
  o.drift = 0.002;
  o.burst = 0.1;
  o.correlation = 0.5;
  o.groups = 4;
  o.groups_per_token = 2;
  o.seed = seed;
  return generate_trace(o);
}

const Case kCases[] = {
    {{2, 2, 9}, 0.0, 1},  {{2, 2, 9}, 0.6, 2},  {{2, 2, 9}, 1.2, 3},  {{1, 4, 10}, 0.9, 4},
    {{4, 4, 2}, 0.3, 5},  {{4, 4, 2}, 1.0, 6},  {{3, 4, 3}, 0.8, 7},  {{8, 2, 2}, 1.5, 8},
};

TEST(Planner, EveryPlacementIsValidAndUsesItsBudget) {
  for (const Case& c : kCases) {
    const Trace trace = small_trace(c.skew, c.seed);
    const Window w{0, 24};
    for (const Placement& p : {plan_eplb(window_load(trace, w), c.topo, 4), plan_moengine(trace, w, c.topo)}) {
      EXPECT_EQ(validate(p, trace.experts), "") << "seed " << c.seed;
      const std::vector<int32_t> totals = device_slot_totals(p);
      for (int32_t n : totals) EXPECT_LE(n, c.topo.slots_per_device * trace.layers);
      EXPECT_EQ(std::accumulate(totals.begin(), totals.end(), 0), c.topo.devices() * c.topo.slots_per_device * trace.layers);
    }
  }
}

// The guard compares with EPLB fed the same forecast loads.
TEST(Planner, MoengineNeverWorseThanEplbOnItsPlanningWindow) {
  for (const Case& c : kCases) {
    const Trace trace = small_trace(c.skew, c.seed);
    for (const Window w : {Window{0, 16}, Window{16, 40}}) {
      const Metrics base = evaluate(trace, w, plan_eplb(forecast_load(trace, w), c.topo, 4));
      const Metrics ours = evaluate(trace, w, plan_moengine(trace, w, c.topo, {0.25, 4, true}));
      EXPECT_GE(ours.balance, base.balance - 1e-12) << "seed " << c.seed;
    }
  }
}

TEST(Planner, MoenginePlacesNoTwoReplicasOfAnExpertOnOneDevice) {
  for (const Case& c : kCases) {
    const Trace trace = small_trace(c.skew, c.seed);
    PlannerOptions o;
    o.compare_with_eplb = false;
    const Placement p = plan_moengine(window_load(trace, {0, 24}), c.topo, o);
    EXPECT_EQ(validate(p, trace.experts), "");
    for (const LayerPlacement& layer : p.layers) {
      std::vector<std::pair<int32_t, int32_t>> held;
      for (size_t s = 0; s < layer.slots.size(); ++s) held.emplace_back(layer.devices[s], layer.slots[s]);
      std::sort(held.begin(), held.end());
      EXPECT_TRUE(std::adjacent_find(held.begin(), held.end()) == held.end()) << "seed " << c.seed;
    }
  }
}

TEST(Planner, RedundancyGoesToTheSkewedLayer) {
  // Layer 0 is flat, layer 1 has one expert with 60% of the load.
  LoadMatrix load{2, 8, {10, 10, 10, 10, 10, 10, 10, 10, 105, 10, 10, 10, 10, 10, 10, 10}};
  const Topology topo{1, 4, 3};  // 12 slots per layer on average: 8 spare in all
  const auto copies = allocate_redundancy(load, topo, 0.25);
  const int32_t flat = std::accumulate(copies[0].begin(), copies[0].end(), 0);
  const int32_t skewed = std::accumulate(copies[1].begin(), copies[1].end(), 0);
  EXPECT_EQ(flat + skewed, 24);
  EXPECT_GT(skewed, flat);
  EXPECT_GE(copies[1][0], 3);
  const Placement p = plan_moengine(load, topo);
  EXPECT_EQ(validate(p, 8), "");
  EXPECT_GE(planning_balance(load, p), planning_balance(load, plan_eplb(load, topo, 1)));
}

TEST(Planner, LayersGetDifferentSlotCountsWithinEachDevicesBudget) {
  // Three flat layers and one where expert 0 carries most of the load.
  LoadMatrix load{4, 8, {}};
  for (int64_t l = 0; l < 4; ++l) {
    for (int64_t e = 0; e < 8; ++e) load.load.push_back(l == 3 && e == 0 ? 200.0 : 10.0);
  }
  const Topology topo{2, 2, 3};  // 12 slots per layer on average, 36 per device in all
  PlannerOptions o;
  o.compare_with_eplb = false;
  const Placement p = plan_moengine(load, topo, o);
  EXPECT_EQ(validate(p, 8), "");
  // Expert 0 of layer 3 gets a replica on every device, so layer 3 holds 11 slots and the
  // flat layers share the rest.
  EXPECT_EQ(replica_counts(p.layers[3], 8)[0], 4);
  EXPECT_NE(p.layers[3].slots.size(), p.layers[0].slots.size());
  const std::vector<int32_t> totals = device_slot_totals(p);
  for (int32_t n : totals) EXPECT_LE(n, 3 * 4);
  EXPECT_EQ(std::accumulate(totals.begin(), totals.end(), 0), 4 * 3 * 4);
}

TEST(Forecast, WeighsRecentStepsWhenTheHotExpertChanges) {
  // One layer, 4 experts: expert 0 is hot for 20 steps, then expert 1 for 12.
  Trace trace{32, 1, 4, {}};
  for (int64_t t = 0; t < 32; ++t) {
    for (int64_t e = 0; e < 4; ++e) trace.load.push_back(e == (t < 20 ? 0 : 1) ? 100.0f : 10.0f);
  }
  const LoadMatrix sum = window_load(trace, {0, 32}), f = forecast_load(trace, {0, 32});
  EXPECT_LT(sum.at(0, 1), sum.at(0, 0));
  EXPECT_GT(f.at(0, 1), f.at(0, 0));
  EXPECT_NEAR(f.at(0, 0) + f.at(0, 1) + f.at(0, 2) + f.at(0, 3), 32 * 130.0, 1e-6);
}

TEST(Forecast, KeepsTheWindowSumForSteadyLoads) {
  Trace trace{16, 2, 3, {}};
  for (int64_t t = 0; t < 16; ++t) {
    for (float v : {5.0f, 1.0f, 0.0f, 2.0f, 2.0f, 2.0f}) trace.load.push_back(v);
  }
  const LoadMatrix sum = window_load(trace, {0, 16}), f = forecast_load(trace, {0, 16});
  for (size_t i = 0; i < sum.load.size(); ++i) EXPECT_NEAR(f.load[i], sum.load[i], 1e-9);
}

Trace burst_trace(float last_step_of_expert_1) {
  // Expert 0 carries 100 a step; expert 1 carries 10 except in the last step. Expert 2
  // rises from 10 to 150 for the last 3 steps and keeps it.
  Trace trace{32, 1, 4, {}};
  for (int64_t t = 0; t < 32; ++t) {
    for (float v : {100.0f, t == 31 ? last_step_of_expert_1 : 10.0f, t >= 29 ? 150.0f : 10.0f, 10.0f}) trace.load.push_back(v);
  }
  return trace;
}

TEST(Forecast, ClipsAOneStepBurstButFollowsALastingChange) {
  const LoadMatrix f = forecast_load(burst_trace(400.0f), {0, 32});
  EXPECT_LT(f.at(0, 1), f.at(0, 0));
  EXPECT_GT(f.at(0, 2), f.at(0, 0));
  // The burst counts as 1.5 x the median of the last three steps (10) + 4.
  const LoadMatrix clipped = forecast_load(burst_trace(19.0f), {0, 32});
  for (size_t i = 0; i < f.load.size(); ++i) EXPECT_DOUBLE_EQ(f.load[i], clipped.load[i]);
  EXPECT_GT(window_load(burst_trace(400.0f), {0, 32}).at(0, 1), window_load(burst_trace(19.0f), {0, 32}).at(0, 1));
}

// One layer of 5 experts on 2 devices x 3 slots: one spare slot. Expert 0 carries a steady
// 100 a step; expert 1 swings between 20 and 140 two steps at a time (mean 80).
Trace steady_and_swinging() {
  Trace trace{16, 1, 5, {}};
  for (int64_t t = 0; t < 16; ++t) {
    for (float v : {100.0f, (t / 2) % 2 ? 140.0f : 20.0f, 10.0f, 10.0f, 10.0f}) trace.load.push_back(v);
  }
  return trace;
}

TEST(Forecast, DeviationIsTheRootMeanSquareMissPerStep) {
  const Trace trace = steady_and_swinging();
  const LoadMatrix f = forecast_load(trace, {0, 16}), dev = forecast_deviation(trace, {0, 16}, f);
  EXPECT_DOUBLE_EQ(dev.at(0, 0), 0.0);
  // A flat forecast (the swing backtests best as the mean) misses every step by 60.
  ASSERT_NEAR(f.at(0, 1), 16 * 80.0, 1e-9);
  EXPECT_NEAR(dev.at(0, 1), 16 * 60.0, 1e-9);
}

TEST(Planner, TheSpareReplicaGoesToTheSwingingExpertUnderRisk) {
  const Trace trace = steady_and_swinging();
  PlannerOptions o;
  o.compare_with_eplb = false;
  o.risk = 0;
  const Placement plain = plan_moengine(trace, {0, 16}, {1, 2, 3}, o);
  o.risk = 0.5;  // expert 1 counts as 80 + 0.5 x 60 = 110 > 100
  const Placement hedged = plan_moengine(trace, {0, 16}, {1, 2, 3}, o);
  EXPECT_EQ(replica_counts(plain.layers[0], 5), (std::vector<int32_t>{2, 1, 1, 1, 1}));
  EXPECT_EQ(replica_counts(hedged.layers[0], 5), (std::vector<int32_t>{1, 2, 1, 1, 1}));
}

TEST(Planner, ATopologyTooSmallForEveryExpertIsAnError) {
  const Trace trace = small_trace(0.5, 1);
  EXPECT_THROW(plan_moengine(trace, {0, 8}, Topology{2, 2, 7}), Error);  // 28 slots < 32 experts
  EXPECT_THROW(plan_eplb(window_load(trace, {0, 8}), Topology{2, 2, 7}, 4), Error);
  EXPECT_THROW(plan_moengine(trace, {0, 8}, Topology{0, 2, 9}), Error);
  EXPECT_THROW(plan_moengine(trace, {8, 8}, Topology{2, 2, 9}), Error);
  EXPECT_THROW(plan_moengine(trace, {0, 49}, Topology{2, 2, 9}), Error);
}

TEST(Incremental, RespectsMaxMovesAndNeverGetsWorse) {
  for (const Case& c : kCases) {
    const Trace trace = small_trace(c.skew, c.seed);
    const Placement current = plan_eplb(window_load(trace, {0, 16}), c.topo, 4);
    const LoadMatrix next = window_load(trace, {32, 48});
    for (int64_t limit : {0, 1, 2, 5, 20}) {
      IncrementalOptions o;
      o.max_moves = limit;
      const IncrementalResult r = plan_incremental(next, current, o);
      EXPECT_EQ(validate(r.placement, trace.experts), "");
      EXPECT_LE(r.moves, limit);
      EXPECT_EQ(r.moves, count_moves(current, r.placement));
      EXPECT_EQ(device_slot_totals(r.placement), device_slot_totals(current));
      EXPECT_GE(r.balance_after, r.balance_before - 1e-12);
      EXPECT_NEAR(r.balance_after, planning_balance(next, r.placement), 1e-9);
      if (limit == 0) {
        EXPECT_EQ(r.moves, 0);
      }
    }
  }
}

TEST(Incremental, KeepsTwoReplicasOfAnExpertOnOneDevice) {
  // EPLB may put two replicas of an expert on one device; incremental moves keep both slots.
  const LoadMatrix load{1, 3, {90, 5, 5}};
  const Placement current{1, 2, 2, {{{0, 0, 1, 2}, {0, 0, 1, 1}}}};
  const IncrementalResult r = plan_incremental(load, current, {});
  EXPECT_EQ(validate(r.placement, 3), "");
  EXPECT_EQ(device_slot_totals(r.placement), device_slot_totals(current));
  EXPECT_GT(r.balance_after, r.balance_before);
}

TEST(Incremental, StopsAtTheTargetBalance) {
  const Trace trace = small_trace(1.0, 11);
  const Topology topo{2, 2, 9};
  const Placement current = plan_eplb(window_load(trace, {0, 16}), topo, 4);
  const LoadMatrix next = window_load(trace, {32, 48});
  IncrementalOptions loose;
  loose.target_balance = planning_balance(next, current) + 0.01;
  const IncrementalResult near = plan_incremental(next, current, loose);
  const IncrementalResult far = plan_incremental(next, current, {});
  EXPECT_GE(near.balance_after, loose.target_balance);
  EXPECT_LE(near.moves, far.moves);
  EXPECT_GE(far.balance_after, near.balance_after);
}

TEST(Metrics, CountMovesIgnoresSlotOrderWithinADevice) {
  Placement a{1, 2, 2, {{{0, 1, 2, 0}, {0, 0, 1, 1}}}};
  Placement b{1, 2, 2, {{{1, 0, 0, 2}, {0, 0, 1, 1}}}};
  EXPECT_EQ(count_moves(a, b), 0);
  Placement c{1, 2, 2, {{{0, 1, 2, 1}, {0, 0, 1, 1}}}};
  EXPECT_EQ(count_moves(a, c), 1);
}

TEST(Metrics, BalanceIsMeanOverBusiestPerStep) {
  // One layer, 2 devices; expert 0 on device 0, expert 1 twice (devices 0 and 1).
  Trace trace{2, 1, 2, {4, 2, 0, 6}};
  Placement p{1, 2, 0, {{{0, 1, 1}, {0, 0, 1}}}};
  const Metrics m = evaluate(trace, {0, 2}, p);
  // Step 0: devices 4+1, 1 -> peak 5, mean 3. Step 1: 0+3, 3 -> peak 3, mean 3.
  EXPECT_DOUBLE_EQ(m.cost, 8);
  EXPECT_DOUBLE_EQ(m.ideal, 6);
  EXPECT_DOUBLE_EQ(m.balance, 0.75);
  EXPECT_DOUBLE_EQ(m.gap, 8.0 / 6.0 - 1.0);
  EXPECT_DOUBLE_EQ(m.remote_share, 0.0);
}

TEST(Metrics, RemoteShareCountsVisitsToExpertsMissingFromTheTokensNode) {
  // 2 nodes; expert 0 on node 0 only (half its visits leave), expert 1 on both.
  Trace trace{1, 1, 2, {10, 30}};
  Placement p{2, 1, 0, {{{0, 1, 1}, {0, 0, 1}}}};
  EXPECT_DOUBLE_EQ(evaluate(trace, {0, 1}, p).remote_share, 5.0 / 40.0);
}

}  // namespace
}  // namespace moe::placement
