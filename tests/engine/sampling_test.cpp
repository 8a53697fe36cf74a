// The per-request sampler: each filter against a reference written the slow, obvious way
// (a full sort), penalties by their exact amounts, reproducibility by seed, the drawn
// frequencies against the filtered distribution, logprobs and the validation messages.
#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace moe {
namespace {

std::vector<float> random_logits(int64_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(size_t(n), 0.0f);
  for (float& x : l) x = d(g);
  return l;
}

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(float(std::log(x)));
  return l;
}

SamplingParams seeded(uint64_t seed, float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

// The filtered distribution the sampler must draw from, computed by sorting everything:
// temperature, then top_k, then top_p (keep while the mass above is < p), then min_p.
std::vector<double> reference(const std::vector<float>& logits, const SamplingParams& sp) {
  const int64_t n = int64_t(logits.size());
  std::vector<double> z(logits.begin(), logits.end());
  for (double& x : z) x /= sp.temperature;
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  const double m = z[order[0]];
  int64_t keep = n;
  if (sp.top_k > 0) keep = std::min<int64_t>(keep, sp.top_k);
  std::vector<double> e(size_t(n), 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) total += std::exp(z[order[i]] - m);
  double above = 0.0;
  int64_t kept = 0;
  for (; kept < keep; ++kept) {
    if (above >= sp.top_p * total) break;
    above += std::exp(z[order[kept]] - m);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < kept; ++i) {
    const double pi = std::exp(z[order[i]] - m);
    if (pi >= sp.min_p) e[order[i]] = pi, sum += pi;  // pi is the ratio to the max prob
  }
  for (double& x : e) x /= sum;
  return e;
}

// Draws n tokens and checks them against the expected distribution: none outside its
// support, and a chi-square statistic far below what a wrong distribution would give.
// `reference_logits`, when given, are what the reference filters instead (the logits the
// sampler should see after its own adjustments, such as a logit bias).
void expect_draws_match(const std::vector<float>& logits, const SamplingParams& sp, int draws,
                        const std::vector<float>* reference_logits = nullptr) {
  const std::vector<double> expected = reference(reference_logits ? *reference_logits : logits, sp);
  Sampler s(sp);
  std::map<int32_t, int> seen;
  for (int i = 0; i < draws; ++i) ++seen[s.sample(logits.data(), int64_t(logits.size()))];
  for (const auto& [t, c] : seen) ASSERT_GT(expected[size_t(t)], 0.0) << "token " << t << " drawn " << c << " times is filtered out";
  double chi2 = 0.0;
  int df = -1;
  for (size_t t = 0; t < expected.size(); ++t) {
    if (expected[t] == 0.0) continue;
    const double e = expected[t] * draws;
    const double o = seen.count(int32_t(t)) ? seen[int32_t(t)] : 0;
    chi2 += (o - e) * (o - e) / e;
    ++df;
  }
  // Mean df, sd sqrt(2 df): six sd is a bound a correct sampler essentially never crosses.
  if (df > 0) {
    EXPECT_LT(chi2, df + 6.0 * std::sqrt(2.0 * df)) << "df " << df;
  }
}

std::set<int32_t> support(const std::vector<float>& logits, const SamplingParams& sp, int draws) {
  Sampler s(sp);
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) seen.insert(s.sample(logits.data(), int64_t(logits.size())));
  return seen;
}

TEST(Sampling, GreedyIsArgmax) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const auto l = random_logits(5000, seed);
    Sampler s(seeded(seed, 0.0f));
    SampleResult r;
    EXPECT_EQ(s.sample(l.data(), 5000, &r), argmax(l.data(), 5000));
    EXPECT_EQ(r.token, argmax(l.data(), 5000));
  }
}

TEST(Sampling, TopK1IsGreedy) {
  const auto l = random_logits(3000, 7, 0.5f);
  SamplingParams p = seeded(1, 2.0f);
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(l.data(), 3000), argmax(l.data(), 3000));
}

TEST(Sampling, TopKKeepsTheKLargest) {
  const auto l = log_probs({0.1, 0.3, 0.05, 0.25, 0.2, 0.1});
  SamplingParams p = seeded(3);
  p.top_k = 3;
  EXPECT_EQ(support(l, p, 3000), (std::set<int32_t>{1, 3, 4}));
  expect_draws_match(l, p, 20000);
  p.top_k = 100;  // larger than the vocabulary: off
  EXPECT_EQ(support(l, p, 3000).size(), 6u);
  p.top_k = -1;
  EXPECT_EQ(support(l, p, 3000).size(), 6u);
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingP) {
  const auto l = log_probs({0.15, 0.5, 0.05, 0.3});
  SamplingParams p = seeded(4);
  p.top_p = 0.4f;  // 0.5 alone reaches it
  EXPECT_EQ(support(l, p, 2000), (std::set<int32_t>{1}));
  p.top_p = 0.75f;  // 0.5 + 0.3
  EXPECT_EQ(support(l, p, 4000), (std::set<int32_t>{1, 3}));
  expect_draws_match(l, p, 20000);
  p.top_p = 0.85f;  // 0.5 + 0.3 + 0.15
  EXPECT_EQ(support(l, p, 6000), (std::set<int32_t>{0, 1, 3}));
  expect_draws_match(l, p, 20000);
}

TEST(Sampling, TopPOverALargeNucleus) {
  // Flat logits make a nucleus of thousands of tokens: the chunked ordering has to grow
  // several times and still cut exactly where a full sort does.
  const auto l = random_logits(20000, 11, 0.3f);
  SamplingParams p = seeded(5);
  p.top_p = 0.3f;
  const auto expected = reference(l, p);
  const auto kept = std::count_if(expected.begin(), expected.end(), [](double x) { return x > 0; });
  EXPECT_GT(kept, 3000);
  EXPECT_LT(kept, 10000);
  Sampler s(p);
  for (int i = 0; i < 1500; ++i) {
    const int32_t t = s.sample(l.data(), 20000);
    ASSERT_GT(expected[size_t(t)], 0.0) << "token " << t << " is outside the nucleus";
  }
}

TEST(Sampling, MinPThresholdIsRelativeToTheMax) {
  const auto l = log_probs({0.1, 0.4, 0.2, 0.3});
  SamplingParams p = seeded(6);
  p.min_p = 0.6f;  // threshold 0.24: keeps 0.4 and 0.3
  EXPECT_EQ(support(l, p, 3000), (std::set<int32_t>{1, 3}));
  expect_draws_match(l, p, 20000);
  p.min_p = 0.4f;  // threshold 0.16: keeps 0.4, 0.3, 0.2
  EXPECT_EQ(support(l, p, 4000), (std::set<int32_t>{1, 2, 3}));
  p.min_p = 1.0f;  // only the max
  EXPECT_EQ(support(l, p, 500), (std::set<int32_t>{1}));
}

TEST(Sampling, AllFiltersAndTemperatureMatchTheReference) {
  const auto l = random_logits(129280, 12, 2.5f);
  SamplingParams p = seeded(8, 0.7f);
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  expect_draws_match(l, p, 4000);
  SamplingParams q = seeded(9, 1.3f);
  q.top_p = 0.6f;
  expect_draws_match(random_logits(2000, 13, 1.5f), q, 40000);
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
  const auto l = log_probs({0.6, 0.3, 0.1});
  expect_draws_match(l, seeded(10, 0.5f), 20000);
  expect_draws_match(l, seeded(11, 2.0f), 20000);
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p = seeded(1);
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1, 1, 3};
  Sampler s(p, prompt);
  s.accept(4);
  s.accept(3);  // also in the prompt: penalised once, not twice
  std::vector<float> l = {1.0f, 4.0f, 2.0f, -3.0f, 0.5f, -1.0f};
  s.apply_penalties(l.data(), 6);
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f, 2.0f, -6.0f, 0.25f, -1.0f}));
}

TEST(Sampling, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  SamplingParams p = seeded(1);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 2};  // the prompt does not count for these
  Sampler s(p, prompt);
  for (int32_t t : {2, 2, 2, 4}) s.accept(t);
  std::vector<float> l = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  s.apply_penalties(l.data(), 5);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], 1.0f);
  EXPECT_FLOAT_EQ(l[2], 1.0f - 0.5f - 3 * 0.25f);
  EXPECT_FLOAT_EQ(l[3], 1.0f);
  EXPECT_FLOAT_EQ(l[4], 1.0f - 0.5f - 0.25f);
}

TEST(Sampling, GreedyAppliesPenalties) {
  SamplingParams p = seeded(1, 0.0f);
  p.frequency_penalty = 1.0f;
  Sampler s(p);
  const std::vector<float> l = {0.0f, 2.5f, 2.0f};
  EXPECT_EQ(s.sample(l.data(), 3), 1);
  s.accept(1);  // 2.5 - 1 = 1.5 < 2
  EXPECT_EQ(s.sample(l.data(), 3), 2);
  s.accept(2);  // 1.5 vs 1.0
  EXPECT_EQ(s.sample(l.data(), 3), 1);
}

std::vector<int32_t> run(Sampler& s, const std::vector<float>& l, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(l.data(), int64_t(l.size())));
  return out;
}

TEST(Sampling, SeedReproducesAndDifferentSeedsDiffer) {
  const auto l = random_logits(1000, 21, 0.5f);
  Sampler a(seeded(42)), b(seeded(42)), c(seeded(43));
  const auto ra = run(a, l, 200), rb = run(b, l, 200), rc = run(c, l, 200);
  EXPECT_EQ(ra, rb);
  // Nearly flat over 1000 tokens: two independent streams agree on about 1 draw in 1000.
  int same = 0;
  for (int i = 0; i < 200; ++i) same += ra[size_t(i)] == rc[size_t(i)];
  EXPECT_LT(same, 10);
}

TEST(Sampling, SeededRequestIgnoresOtherRequestsInTheBatch) {
  const auto l = random_logits(1000, 22, 0.5f);
  Sampler alone(seeded(7));
  const auto expected = run(alone, l, 50);
  // The same request interleaved with others, as in a batch step after step.
  Sampler mine(seeded(7)), other1(seeded(8)), other2(SamplingParams{});
  std::vector<int32_t> got;
  for (int i = 0; i < 50; ++i) {
    other1.sample(l.data(), 1000);
    got.push_back(mine.sample(l.data(), 1000));
    other2.sample(l.data(), 1000);
  }
  EXPECT_EQ(got, expected);
}

TEST(Sampling, UnseededRequestsDiffer) {
  const auto l = random_logits(1000, 23, 0.5f);
  Sampler a{SamplingParams{}}, b{SamplingParams{}};
  EXPECT_NE(run(a, l, 50), run(b, l, 50));
}

TEST(Sampling, LogprobsAreLogSoftmaxOfRawLogits) {
  const auto l = random_logits(129280, 31, 4.0f);
  SamplingParams p = seeded(2, 0.5f);
  p.top_k = 10;
  p.repetition_penalty = 1.5f;
  p.logprobs = true;
  p.top_logprobs = 5;
  const std::vector<int32_t> prompt = {argmax(l.data(), int64_t(l.size()))};
  Sampler s(p, prompt);
  double sum = 0.0;
  const float m = l[size_t(prompt[0])];
  for (float x : l) sum += std::exp(double(x) - m);
  const double lse = m + std::log(sum);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  SampleResult r;
  for (int i = 0; i < 20; ++i) {
    const int32_t t = s.sample(l.data(), int64_t(l.size()), &r);
    EXPECT_EQ(r.token, t);
    EXPECT_NEAR(r.logprob, l[size_t(t)] - lse, 1e-4);
    ASSERT_EQ(r.top.size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(r.top[k].token, order[k]);
      EXPECT_NEAR(r.top[k].logprob, l[size_t(order[k])] - lse, 1e-4);
    }
    s.accept(t);
  }
}

TEST(Sampling, LogitBiasShiftsTheLogitsItNames) {
  const auto l = random_logits(1000, 41);
  const int32_t top = argmax(l.data(), 1000);
  const int32_t bottom = int32_t(std::min_element(l.begin(), l.end()) - l.begin());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logit_bias = {{bottom, 100.0f}};
  EXPECT_EQ(Sampler(greedy).sample(l.data(), 1000), bottom);
  greedy.logit_bias = {{top, -100.0f}};
  std::vector<float> without_top = l;
  without_top[size_t(top)] -= 100.0f;
  EXPECT_EQ(Sampler(greedy).sample(l.data(), 1000), argmax(without_top.data(), 1000));

  // Drawn with temperature and filters: the distribution of the biased logits.
  SamplingParams p = seeded(5, 0.8f);
  p.top_k = 50;
  p.logit_bias = {{bottom, 12.0f}, {top, -2.5f}, {7, 3.0f}};
  std::vector<float> biased = l;
  for (const auto& [t, b] : p.logit_bias) biased[size_t(t)] += b;
  expect_draws_match(l, p, 20000, &biased);

  // Logprobs stay those of the model's logits.
  p.logprobs = true;
  Sampler s(p);
  SampleResult r;
  double sum = 0.0;
  for (float x : l) sum += std::exp(double(x) - l[size_t(top)]);
  const double lse = l[size_t(top)] + std::log(sum);
  const int32_t t = s.sample(l.data(), 1000, &r);
  EXPECT_NEAR(r.logprob, l[size_t(t)] - lse, 1e-4);

  SamplingParams past_vocab;
  past_vocab.logit_bias = {{1000, 1.0f}};
  EXPECT_THROW(Sampler(past_vocab).sample(l.data(), 1000), Error);
}

TEST(Sampling, NoLogprobsUnlessAsked) {
  const auto l = log_probs({0.5, 0.5});
  Sampler s(seeded(1));
  SampleResult r;
  r.top.push_back({0, -1.0f});
  s.sample(l.data(), 2, &r);
  EXPECT_TRUE(r.top.empty());
  EXPECT_EQ(r.logprob, 0.0f);
}

void expect_invalid(void (*set)(SamplingParams&), const std::string& message) {
  SamplingParams p;
  set(p);
  try {
    p.validate();
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(Sampling, ValidationNamesTheFieldAndRange) {
  EXPECT_NO_THROW(SamplingParams{}.validate());
  expect_invalid([](SamplingParams& p) { p.temperature = -0.5f; }, "temperature must be a finite number >= 0, got -0.5");
  expect_invalid([](SamplingParams& p) { p.temperature = NAN; }, "temperature must be a finite number >= 0, got nan");
  expect_invalid([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5");
  expect_invalid([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0");
  expect_invalid([](SamplingParams& p) { p.top_k = -2; }, "top_k must be -1 or 0 (off) or at least 1, got -2");
  expect_invalid([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p must be in [0, 1], got 1.5");
  expect_invalid([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p must be in [0, 1], got -0.1");
  expect_invalid([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty must be a finite number > 0, got 0");
  expect_invalid([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2], got 2.5");
  expect_invalid([](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty must be in [-2, 2], got -3");
  expect_invalid([](SamplingParams& p) { p.logprobs = true, p.top_logprobs = 21; }, "top_logprobs must be in [0, 20], got 21");
  expect_invalid([](SamplingParams& p) { p.top_logprobs = 3; }, "top_logprobs requires logprobs to be true, got top_logprobs 3 without it");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{5, 101.0f}}; }, "logit_bias for token 5 must be in [-100, 100], got 101");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{5, NAN}}; }, "logit_bias for token 5 must be in [-100, 100], got nan");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias token id -1 is negative");
}

TEST(Sampling, BadCallsFailClearly) {
  Sampler s(seeded(1));
  EXPECT_THROW(s.accept(-1), Error);
  const float x = 0.0f;
  EXPECT_THROW(s.sample(&x, 0), Error);
}

}  // namespace
}  // namespace moe
