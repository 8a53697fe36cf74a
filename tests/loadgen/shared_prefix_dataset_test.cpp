// The generated-shared-prefix dataset: prefixes, lengths, determinism, popularity skew.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "loadgen/shared_prefix_dataset.h"
#include "support/bytes_test_util.h"

namespace moe::loadgen {
namespace {

SharedPrefixOptions base_options() {
  SharedPrefixOptions o;
  o.num_prompts = 240;
  o.num_groups = 6;
  o.system_prompt_len = 100;
  o.question_len = 20;
  o.question_range_ratio = 0.5;
  o.long_question_len = 300;
  o.long_question_fraction = 0.1;
  o.output_len = 7;
  o.zipf_exponent = 1.0;
  o.vocab_size = 50;
  o.seed = 3;
  return o;
}

TEST(SharedPrefixDataset, EveryPromptStartsWithItsGroupsSystemPrompt) {
  const SharedPrefixOptions o = base_options();
  const SharedPrefixDataset d = shared_prefix_dataset(o);
  ASSERT_EQ(d.requests.size(), 240u);
  ASSERT_EQ(d.group_of.size(), 240u);
  ASSERT_EQ(d.system_prompts.size(), 6u);
  for (const auto& p : d.system_prompts) ASSERT_EQ(p.size(), 100u);
  // Distinct groups must differ in their first 16-token block, or an engine's prefix cache
  // would share blocks across groups.
  std::set<std::vector<int32_t>> first_blocks;
  for (const auto& p : d.system_prompts) first_blocks.insert(std::vector<int32_t>(p.begin(), p.begin() + 16));
  EXPECT_EQ(first_blocks.size(), 6u);
  for (size_t i = 0; i < d.requests.size(); ++i) {
    const auto& ids = d.requests[i].prompt_ids;
    const auto& prefix = d.system_prompts[d.group_of[i]];
    ASSERT_GT(ids.size(), prefix.size());
    ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), ids.begin())) << "request " << i;
    EXPECT_TRUE(d.requests[i].prompt_text.empty());
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 50);
    }
  }
}

TEST(SharedPrefixDataset, QuestionLengthsStayInTheirRangesAndExactlyTheLongFractionIsLong) {
  const SharedPrefixOptions o = base_options();
  const SharedPrefixDataset d = shared_prefix_dataset(o);
  size_t long_ones = 0;
  std::set<int64_t> short_lens;
  for (const SampleRequest& r : d.requests) {
    ASSERT_EQ(r.prompt_len, int64_t(r.prompt_ids.size()));
    EXPECT_EQ(r.output_len, 7);
    const int64_t q = r.prompt_len - 100;
    if (q >= 150) {
      ASSERT_LE(q, 450);  // 300 * (1 +- 0.5)
      ++long_ones;
    } else {
      ASSERT_GE(q, 10);  // 20 * (1 +- 0.5)
      ASSERT_LE(q, 30);
      short_lens.insert(q);
    }
  }
  EXPECT_EQ(long_ones, 24u);  // round(240 * 0.1)
  EXPECT_GT(short_lens.size(), 15u);  // 216 draws cover most of the 21 lengths
}

TEST(SharedPrefixDataset, FixedLengthsWithoutARangeRatio) {
  SharedPrefixOptions o = base_options();
  o.question_range_ratio = 0;
  o.long_question_fraction = 0;
  for (const SampleRequest& r : shared_prefix_dataset(o).requests) EXPECT_EQ(r.prompt_len, 120);
}

TEST(SharedPrefixDataset, TheSameSeedGivesTheSameDatasetAndAnotherSeedAnotherOrder) {
  const SharedPrefixOptions o = base_options();
  const SharedPrefixDataset a = shared_prefix_dataset(o), b = shared_prefix_dataset(o);
  EXPECT_EQ(a.group_of, b.group_of);
  EXPECT_EQ(a.system_prompts, b.system_prompts);
  for (size_t i = 0; i < a.requests.size(); ++i) ASSERT_EQ(a.requests[i].prompt_ids, b.requests[i].prompt_ids);

  SharedPrefixOptions other = o;
  other.seed = 4;
  const SharedPrefixDataset c = shared_prefix_dataset(other);
  EXPECT_NE(c.group_of, a.group_of);
  EXPECT_NE(c.system_prompts, a.system_prompts);
  // The skew fixes how many requests each group gets, whatever the seed.
  std::vector<size_t> per_group_a(6), per_group_c(6);
  for (size_t g : a.group_of) ++per_group_a[g];
  for (size_t g : c.group_of) ++per_group_c[g];
  EXPECT_EQ(per_group_a, per_group_c);
}

TEST(SharedPrefixDataset, RequestsOfAGroupAreSpreadOverTheRunNotBunched) {
  const SharedPrefixDataset d = shared_prefix_dataset(base_options());
  // Group 0 (the hottest, 98 of 240) appears in both halves of the sequence.
  const auto half = d.group_of.begin() + 120;
  EXPECT_GT(std::count(d.group_of.begin(), half, size_t(0)), 30);
  EXPECT_GT(std::count(half, d.group_of.end(), size_t(0)), 30);
}

TEST(SharedPrefixDataset, GroupCountsFollowTheZipfSharesExactly) {
  // Shares 1, 1/2, ..., 1/6 of H(6) = 2.45: 240 requests give exactly 97.96, 48.98, 32.65,
  // 24.49, 19.59, 16.33, apportioned by the largest remainders.
  EXPECT_EQ(shared_prefix_group_counts(240, 6, 1.0), (std::vector<size_t>{98, 49, 33, 24, 20, 16}));
  const SharedPrefixDataset d = shared_prefix_dataset(base_options());
  std::vector<size_t> per_group(6);
  for (size_t g : d.group_of) ++per_group[g];
  EXPECT_EQ(per_group, (std::vector<size_t>{98, 49, 33, 24, 20, 16}));

  // No skew: as even as the count allows, the extra ones to the first groups.
  EXPECT_EQ(shared_prefix_group_counts(10, 4, 0.0), (std::vector<size_t>{3, 3, 2, 2}));
  // Exponent 2: shares 1, 1/4, 1/9 of 1.361.
  EXPECT_EQ(shared_prefix_group_counts(100, 3, 2.0), (std::vector<size_t>{74, 18, 8}));
  for (size_t n : {0u, 1u, 7u, 1000u}) {
    const auto c = shared_prefix_group_counts(n, 5, 1.2);
    EXPECT_EQ(std::accumulate(c.begin(), c.end(), size_t(0)), n);
    EXPECT_TRUE(std::is_sorted(c.rbegin(), c.rend()));  // never more for a less popular group
  }
}

TEST(SharedPrefixDataset, RejectsBadOptionsNamingTheFlag) {
  auto error_with = [](auto change) {
    SharedPrefixOptions o = base_options();
    change(o);
    return testing::error_of([&] { shared_prefix_dataset(o); });
  };
  EXPECT_NE(error_with([](auto& o) { o.num_groups = 0; }).find("--gsp-num-groups"), std::string::npos);
  EXPECT_NE(error_with([](auto& o) { o.system_prompt_len = 0; }).find("--gsp-system-prompt-len"), std::string::npos);
  EXPECT_NE(error_with([](auto& o) { o.question_len = 0; }).find("--gsp-question-len"), std::string::npos);
  EXPECT_NE(error_with([](auto& o) { o.question_range_ratio = 1; }).find("--gsp-question-range-ratio"),
            std::string::npos);
  EXPECT_NE(error_with([](auto& o) { o.long_question_fraction = 1.5; }).find("--gsp-long-question-fraction"),
            std::string::npos);
  EXPECT_NE(error_with([](auto& o) { o.long_question_len = 0; }).find("--gsp-long-question-len"), std::string::npos);
  EXPECT_NE(error_with([](auto& o) { o.zipf_exponent = -1; }).find("--gsp-zipf"), std::string::npos);
  EXPECT_NE(error_with([](auto& o) { o.output_len = 0; }).find("--output-len"), std::string::npos);
}

}  // namespace
}  // namespace moe::loadgen
