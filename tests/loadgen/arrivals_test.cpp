// Request arrival times: Poisson (exponential gaps) by default, gamma with a burstiness
// factor, everything at once for an infinite rate.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "loadgen/arrivals.h"

namespace moe::loadgen {
namespace {

struct GapStats {
  double mean, cv;  // coefficient of variation: stddev / mean
};

GapStats gap_stats(const std::vector<double>& offsets) {
  std::vector<double> gaps;
  for (size_t i = 1; i < offsets.size(); ++i) gaps.push_back(offsets[i] - offsets[i - 1]);
  double sum = 0, sq = 0;
  for (double g : gaps) sum += g;
  const double mean = sum / double(gaps.size());
  for (double g : gaps) sq += (g - mean) * (g - mean);
  return {mean, std::sqrt(sq / double(gaps.size())) / mean};
}

TEST(Arrivals, PoissonGapsHaveMeanOneOverRateAndUnitVariation) {
  const auto offsets = arrival_offsets(20001, 4.0, 1.0, 7);
  EXPECT_EQ(offsets.front(), 0.0);
  for (size_t i = 1; i < offsets.size(); ++i) ASSERT_GE(offsets[i], offsets[i - 1]);
  const GapStats s = gap_stats(offsets);
  // The mean of 20000 exponential gaps is within 0.7% (one standard error) of 0.25 most
  // of the time; 3% is over four standard errors.
  EXPECT_NEAR(s.mean, 0.25, 0.25 * 0.03);
  EXPECT_NEAR(s.cv, 1.0, 0.05);
}

TEST(Arrivals, BurstinessChangesTheSpreadNotTheRate) {
  const GapStats bursty = gap_stats(arrival_offsets(20001, 4.0, 0.5, 3));
  EXPECT_NEAR(bursty.mean, 0.25, 0.25 * 0.04);
  EXPECT_NEAR(bursty.cv, std::sqrt(2.0), 0.08);  // gamma: cv = 1 / sqrt(shape)
  const GapStats even = gap_stats(arrival_offsets(20001, 4.0, 4.0, 3));
  EXPECT_NEAR(even.mean, 0.25, 0.25 * 0.03);
  EXPECT_NEAR(even.cv, 0.5, 0.03);
}

TEST(Arrivals, SameSeedSameTimesOtherSeedOtherTimes) {
  EXPECT_EQ(arrival_offsets(100, 2.0, 1.0, 42), arrival_offsets(100, 2.0, 1.0, 42));
  EXPECT_NE(arrival_offsets(100, 2.0, 1.0, 42), arrival_offsets(100, 2.0, 1.0, 43));
}

TEST(Arrivals, InfiniteRateSendsEverythingAtOnce) {
  const auto offsets = arrival_offsets(10, std::numeric_limits<double>::infinity(), 1.0, 1);
  EXPECT_EQ(offsets, std::vector<double>(10, 0.0));
  EXPECT_TRUE(arrival_offsets(0, 1.0, 1.0, 1).empty());
}

TEST(Arrivals, RejectsRatesAndBurstinessThatAreNotPositive) {
  EXPECT_THROW(arrival_offsets(3, 0.0, 1.0, 1), Error);
  EXPECT_THROW(arrival_offsets(3, -1.0, 1.0, 1), Error);
  EXPECT_THROW(arrival_offsets(3, std::nan(""), 1.0, 1), Error);
  EXPECT_THROW(arrival_offsets(3, 1.0, 0.0, 1), Error);
}

}  // namespace
}  // namespace moe::loadgen
