// The run summary of an expert-parallel group: step times split by copies and by prefill,
// and the load's balance before the first re-placement and after the last.
#include "moe/ep_step_stats.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(EpRunSummary, DecodeOnlyStepsAreMeasuredApartFromPrefills) {
  std::vector<EpStepRecord> steps;
  for (int i = 0; i < 10; ++i) steps.push_back({10.0 + i, false, false});  // decode: 10..19 ms
  steps.push_back({100.0, false, true});                                  // a prefill
  for (int i = 0; i < 4; ++i) steps.push_back({12.0, true, false});       // decode during copies
  steps.push_back({80.0, true, true});                                    // a prefill during copies
  const EpRunSummary s = summarize_run(steps, {}, {}, 1, 2, 0);
  EXPECT_EQ(s.steps, 16);
  EXPECT_EQ(s.copying.steps, 5);
  EXPECT_EQ(s.copying.max_ms, 80.0);
  EXPECT_EQ(s.other.max_ms, 100.0);
  EXPECT_EQ(s.decode.steps, 14);
  EXPECT_EQ(s.decode_copying.steps, 4);
  EXPECT_EQ(s.decode_copying.max_ms, 12.0);
  EXPECT_EQ(s.decode_other.steps, 10);
  EXPECT_EQ(s.decode_other.max_ms, 19.0);
  EXPECT_EQ(s.decode_other.median_ms, 15.0);
  const std::string line = describe(s);
  EXPECT_NE(line.find("14 decode-only steps"), std::string::npos) << line;
  EXPECT_NE(line.find("4 steps during copies, p90 12.00 ms"), std::string::npos) << line;
}

TEST(EpRunSummary, LoadBalanceBeforeTheFirstSwitchAndAfterTheLast) {
  // 2 ranks, 1 layer; the window is the run's last 4 steps of 6.
  std::vector<EpStepRecord> steps(6, EpStepRecord{1.0, false, false});
  const std::vector<std::vector<int64_t>> pairs = {{3, 1}, {3, 1}, {2, 2}, {2, 2}};
  const EpRunSummary s = summarize_run(steps, {4}, pairs, 1, 2, 1 << 20);
  EXPECT_EQ(s.switches, 1);
  EXPECT_DOUBLE_EQ(s.imbalance_before, 1.5);  // steps 2 and 3: the busier rank 6, the mean 4
  EXPECT_DOUBLE_EQ(s.imbalance_after, 1.0);
  EXPECT_EQ(s.decode_copying.steps, 0);
}

}  // namespace
}  // namespace moe
