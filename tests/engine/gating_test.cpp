// The router on hand-worked cases (docs/architectures.md section 4).
#include "moe/gating.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace moe {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> w;
};

Routed route(const GatingConfig& cfg, const std::vector<float>& logits, const float* bias = nullptr) {
  Routed r{std::vector<int32_t>(size_t(cfg.n_used)), std::vector<float>(size_t(cfg.n_used))};
  std::vector<float> scratch(2 * logits.size());
  route_token(cfg, logits.data(), bias, r.ids.data(), r.w.data(), scratch.data());
  return r;
}

TEST(Gating, SoftmaxTopKKeepsFullSoftmaxWeightsWithoutNorm) {
  GatingConfig cfg{4, 2, GatingFunc::Softmax, 1, 1, false, 0.0f};
  const Routed r = route(cfg, {0.0f, 2.0f, 1.0f, -1.0f});
  ASSERT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
  const double z = std::exp(0.0) + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(r.w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(r.w[1], std::exp(1.0) / z, 1e-6);
}

TEST(Gating, NormalizeAndScale) {
  GatingConfig cfg{4, 2, GatingFunc::Softmax, 1, 1, true, 2.5f};
  const Routed r = route(cfg, {0.0f, 2.0f, 1.0f, -1.0f});
  const double a = std::exp(2.0), b = std::exp(1.0);
  EXPECT_NEAR(r.w[0], 2.5 * a / (a + b), 1e-5);
  EXPECT_NEAR(r.w[1], 2.5 * b / (a + b), 1e-5);
}

TEST(Gating, SigmoidBiasSelectsButDoesNotWeigh) {
  GatingConfig cfg{4, 1, GatingFunc::Sigmoid, 1, 1, false, 0.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.5f};
  const Routed r = route(cfg, {0.0f, 1.0f, 0.0f, 0.5f}, bias.data());
  ASSERT_EQ(r.ids[0], 3);  // sigmoid(0.5) + 0.5 beats sigmoid(1.0)
  EXPECT_NEAR(r.w[0], 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
}

TEST(Gating, GroupLimitedSigmoidScoresGroupsByTheirTopTwo) {
  // Groups {0,1}, {2,3}, {4,5}. Group 0 has the single best expert but a weak second;
  // group 1 has the best top-2 sum; keep one group.
  GatingConfig cfg{6, 2, GatingFunc::Sigmoid, 3, 1, false, 0.0f};
  const std::vector<float> logits = {4.0f, -4.0f, 1.5f, 1.5f, 0.0f, 0.0f};
  const Routed r = route(cfg, logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
}

TEST(Gating, GroupLimitedSoftmaxScoresGroupsByTheirBest) {
  GatingConfig cfg{6, 2, GatingFunc::Softmax, 3, 1, false, 0.0f};
  const std::vector<float> logits = {4.0f, -4.0f, 1.5f, 1.5f, 0.0f, 0.0f};
  const Routed r = route(cfg, logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
}

TEST(Gating, NormClampsATinySum) {
  GatingConfig cfg{2, 1, GatingFunc::Sigmoid, 1, 1, true, 0.0f};
  const Routed r = route(cfg, {-30.0f, -40.0f});
  EXPECT_NEAR(r.w[0], (1.0 / (1.0 + std::exp(30.0))) / 6.103515625e-5, 1e-9);
}

}  // namespace
}  // namespace moe
