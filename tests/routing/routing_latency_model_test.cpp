// The prefill latency model: its prior, fitting a known curve, robustness to outliers and
// to bad input, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "proxy/policy/prefill_latency_model.h"

namespace moe::routing {
namespace {

// A synthetic instance: t = a + b*n + c*n^2 without a prefix (the form the model reduces
// to), and the attention term over the cached tokens as well.
struct Curve {
  double a, b, c;
  double seconds(int64_t n, int64_t m = 0) const { return a + b * double(n) + c * 2 * attention_pairs(n, m); }
};

constexpr Curve kGpu{0.02, 1.5e-4, 2e-8};
constexpr Curve kCpu{0.05, 2e-3, 1e-7};  // ~100x slower than the prior

// Prompt lengths from a fixed LCG, log-uniform over 100 to 16,000 tokens (as many
// prompts of 100-400 tokens as of 4,000-16,000, as in chat traffic).
struct Lengths {
  uint64_t state = 12345;
  int64_t next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = double(state >> 11) / double(uint64_t{1} << 53);
    return int64_t(100 * std::pow(160.0, u));
  }
};

void feed(PrefillLatencyModel& model, const Curve& curve, int n, double noise = 0) {
  Lengths lengths;
  for (int i = 0; i < n; ++i) {
    const int64_t tokens = lengths.next();
    const double jitter = noise * (i % 5 - 2) / 2.0;  // -noise .. +noise, deterministic
    model.observe(tokens, 0, curve.seconds(tokens) * (1 + jitter));
  }
}

void expect_close(const PrefillLatencyModel& model, const Curve& curve, double tolerance) {
  for (int64_t n : {200, 1000, 4000, 8000, 16000})
    EXPECT_NEAR(model.fit().seconds(n, 0) / curve.seconds(n), 1.0, tolerance) << n << " tokens";
}

TEST(PrefillLatencyModel, StartsFromThePrior) {
  const PrefillLatencyModel model;
  const PrefillTimeFit prior;
  EXPECT_EQ(model.observations(), 0);
  EXPECT_DOUBLE_EQ(model.fit().seconds(2048, 0), prior.seconds(2048, 0));
  // Superlinear: twice the tokens takes more than twice the time, less the fixed part.
  EXPECT_GT(prior.seconds(16000, 0) - prior.fixed_s, 2 * (prior.seconds(8000, 0) - prior.fixed_s));
}

TEST(PrefillLatencyModel, AttentionOverTheCachedPrefixStillCosts) {
  const PrefillTimeFit fit;
  EXPECT_GT(fit.seconds(1000, 3000), fit.seconds(1000, 0));
  EXPECT_LT(fit.seconds(1000, 3000), fit.seconds(4000, 0));
  EXPECT_DOUBLE_EQ(attention_pairs(4, 0), 10);  // 1 + 2 + 3 + 4
  EXPECT_DOUBLE_EQ(attention_pairs(2, 3), 4 + 5);
}

TEST(PrefillLatencyModel, QueueIsEqualUncachedPrompts) {
  const PrefillTimeFit fit;
  EXPECT_DOUBLE_EQ(fit.queue_seconds(0, 0), 0);
  EXPECT_NEAR(fit.queue_seconds(6000, 3), 3 * fit.seconds(2000, 0), 1e-12);
  EXPECT_NEAR(fit.queue_seconds(500, 0), fit.seconds(500, 0), 1e-12);
}

TEST(PrefillLatencyModel, FitsAQuadratic) {
  PrefillLatencyModel gpu;
  feed(gpu, kGpu, 150);
  expect_close(gpu, kGpu, 0.02);
  PrefillLatencyModel cpu;
  feed(cpu, kCpu, 150);
  expect_close(cpu, kCpu, 0.02);
}

TEST(PrefillLatencyModel, FitsThroughNoise) {
  PrefillLatencyModel model;
  feed(model, kGpu, 200, 0.1);
  expect_close(model, kGpu, 0.05);
}

TEST(PrefillLatencyModel, FitsPrefixHits) {
  PrefillLatencyModel model;
  Lengths lengths;
  for (int i = 0; i < 150; ++i) {
    const int64_t n = lengths.next(), m = (i % 3) * 2000;
    model.observe(n, m, kGpu.seconds(n, m));
  }
  EXPECT_NEAR(model.fit().seconds(1000, 6000) / kGpu.seconds(1000, 6000), 1.0, 0.02);
}

TEST(PrefillLatencyModel, ShrugsOffASingleOutlier) {
  PrefillLatencyModel model;
  feed(model, kGpu, 150, 0.02);
  model.observe(4000, 0, 20 * kGpu.seconds(4000));  // stalled behind something else
  expect_close(model, kGpu, 0.03);
  model.observe(4000, 0, kGpu.seconds(4000) / 20);  // a bogus report
  expect_close(model, kGpu, 0.03);
}

TEST(PrefillLatencyModel, FollowsAGenuineSlowdown) {
  PrefillLatencyModel model;
  feed(model, kGpu, 150, 0.02);
  const Curve slower{kGpu.a * 2, kGpu.b * 2, kGpu.c * 2};
  feed(model, slower, 150, 0.02);
  expect_close(model, slower, 0.05);
}

TEST(PrefillLatencyModel, UninformativeObservationsAreNotCounted) {
  PrefillLatencyModel model;
  model.observe(0, 100, 0.5);
  model.observe(100, 0, 0);
  model.observe(100, 0, -1);
  model.observe(100, -5, 0.5);
  model.observe(100, 0, std::numeric_limits<double>::quiet_NaN());
  model.observe(100, 0, std::numeric_limits<double>::infinity());
  EXPECT_EQ(model.observations(), 0);
  EXPECT_DOUBLE_EQ(model.fit().seconds(2048, 0), PrefillTimeFit{}.seconds(2048, 0));
}

TEST(PrefillLatencyModel, SameObservationsSameFit) {
  PrefillLatencyModel a, b;
  feed(a, kGpu, 100, 0.1);
  feed(b, kGpu, 100, 0.1);
  EXPECT_EQ(a.fit().fixed_s, b.fit().fixed_s);
  EXPECT_EQ(a.fit().per_token_s, b.fit().per_token_s);
  EXPECT_EQ(a.fit().per_pair_s, b.fit().per_pair_s);
  EXPECT_EQ(a.observations(), 100);
}

}  // namespace
}  // namespace moe::routing
