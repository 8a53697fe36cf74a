// The expert-load recorder's window: steps kept oldest first, the oldest dropped past the
// capacity, steps recorded but not yet synced left out of it, the computed pairs and how
// unevenly the ranks computed them, in all and per 2 s period.
#include "moe/expert_load.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(ExpertLoadRecorder, TheWindowKeepsTheLastStepsInOrder) {
  SoloComm comm;
  ExpertLoadRecorder rec(2, 4, 1, 3);
  for (int32_t step = 0; step < 5; ++step) {
    // Step s: one token choosing experts s % 4 and 3 in layer 0, expert 1 twice in layer 1.
    const int32_t l0[] = {step % 4, 3};
    const int32_t l1[] = {1, 1};
    rec.add_routed(0, l0, 2);
    rec.add_routed(1, l1, 2);
    rec.add_computed(0, 2);
    rec.add_computed(1, 2);
    rec.end_step();
  }
  EXPECT_EQ(rec.window().steps, 0);  // nothing synced yet
  rec.sync(comm);
  const placement::Trace t = rec.window();
  ASSERT_EQ(t.steps, 3);
  for (int64_t i = 0; i < 3; ++i) {
    const int32_t step = int32_t(i + 2);
    for (int32_t e = 0; e < 4; ++e) {
      EXPECT_EQ(t.at(i, 0, e), float((e == step % 4) + (e == 3))) << "step " << step << " expert " << e;
      EXPECT_EQ(t.at(i, 1, e), e == 1 ? 2.0f : 0.0f);
    }
  }
  EXPECT_EQ(rec.computed_total(), 20u);
  EXPECT_EQ(rec.imbalance(), 1.0);
  // The sums over the window are those of the steps kept (2, 3 and 4), not of all five.
  int64_t steps = 0;
  EXPECT_EQ(rec.window_load(&steps), (std::vector<int64_t>{1, 0, 1, 4, 0, 6, 0, 0}));
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(rec.window_rank_pairs(), (std::vector<int64_t>{6, 6}));
}

TEST(ExpertLoadRecorder, SyncsAreDueEverySixteenSteps) {
  ExpertLoadRecorder rec(1, 2, 1, 64);
  for (int64_t i = 0; i < ExpertLoadRecorder::kSyncSteps; ++i) {
    EXPECT_FALSE(rec.sync_due());
    rec.end_step();
  }
  EXPECT_TRUE(rec.sync_due());
  EXPECT_EQ(rec.imbalance(), 0.0);
}

TEST(ExpertLoadRecorder, ImbalanceIsTheLayersPeaksOverTheirMeans) {
  // Layer 0: ranks carry 3 and 1; layer 1: 2 and 2. Peaks 3 + 2, means 2 + 2.
  EXPECT_DOUBLE_EQ(layer_imbalance({3, 1, 2, 2}, 2, 2), 5.0 / 4.0);
  EXPECT_DOUBLE_EQ(layer_imbalance({0, 0, 0, 0}, 2, 2), 0.0);
  EXPECT_EQ(per_layer_imbalance({3, 1, 2, 2, 0, 0}, 3, 2), (std::vector<double>{1.5, 1.0, 0.0}));
}

TEST(ExpertLoadRecorder, SyncedStepsLandInTheirWallClockPeriod) {
  SoloComm comm;
  ExpertLoadRecorder rec(2, 4, 1, 64);
  const auto at = [](double s) {
    return ExpertLoadRecorder::WallClock::time_point(std::chrono::duration_cast<ExpertLoadRecorder::WallClock::duration>(
        std::chrono::duration<double>(s)));
  };
  const auto steps = [&](int n, int64_t pairs) {
    for (int i = 0; i < n; ++i) {
      rec.add_computed(0, pairs);
      rec.add_computed(1, 2 * pairs);
      rec.end_step();
    }
  };
  steps(3, 1);
  rec.sync(comm, at(1000.5));
  steps(2, 1);
  rec.sync(comm, at(1001.9));  // the same period, [1000, 1002)
  steps(4, 5);
  rec.sync(comm, at(1002.0));
  const std::vector<LoadPeriod> p = rec.periods();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].start_unix_s, 1000.0);
  EXPECT_EQ(p[0].steps, 5);
  EXPECT_EQ(p[0].rank_pairs, (std::vector<int64_t>{5, 10}));
  EXPECT_EQ(p[1].start_unix_s, 1002.0);
  EXPECT_EQ(p[1].steps, 4);
  EXPECT_EQ(p[1].rank_pairs, (std::vector<int64_t>{20, 40}));

  // Only the last kPeriods periods are kept.
  for (size_t i = 0; i < ExpertLoadRecorder::kPeriods + 5; ++i) {
    steps(1, 1);
    rec.sync(comm, at(2000.0 + 2.0 * double(i)));
  }
  const std::vector<LoadPeriod> kept = rec.periods();
  ASSERT_EQ(kept.size(), ExpertLoadRecorder::kPeriods);
  EXPECT_EQ(kept.front().start_unix_s, 2010.0);
  EXPECT_EQ(kept.back().start_unix_s, 2000.0 + 2.0 * double(ExpertLoadRecorder::kPeriods + 4));
}

}  // namespace
}  // namespace moe
