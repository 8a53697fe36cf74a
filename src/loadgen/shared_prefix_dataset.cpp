#include "loadgen/shared_prefix_dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace moe::loadgen {
namespace {

int64_t draw_question_len(std::mt19937_64& rng, int64_t len, double ratio) {
  const auto lo = std::max<int64_t>(1, int64_t(std::floor(double(len) * (1 - ratio))));
  const auto hi = std::max<int64_t>(lo, int64_t(std::ceil(double(len) * (1 + ratio))));
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

void check(const SharedPrefixOptions& o) {
  if (o.num_groups < 1) fail("generated-shared-prefix dataset: --gsp-num-groups must be at least 1");
  if (o.system_prompt_len < 1) fail("generated-shared-prefix dataset: --gsp-system-prompt-len must be at least 1");
  if (o.question_len < 1) fail("generated-shared-prefix dataset: --gsp-question-len must be at least 1");
  if (!(o.question_range_ratio >= 0 && o.question_range_ratio < 1))
    fail("generated-shared-prefix dataset: --gsp-question-range-ratio must be in [0, 1)");
  if (!(o.long_question_fraction >= 0 && o.long_question_fraction <= 1))
    fail("generated-shared-prefix dataset: --gsp-long-question-fraction must be in [0, 1]");
  if (o.long_question_fraction > 0 && o.long_question_len < 1)
    fail("generated-shared-prefix dataset: --gsp-long-question-fraction needs --gsp-long-question-len of at least 1");
  if (!(o.zipf_exponent >= 0 && std::isfinite(o.zipf_exponent)))
    fail("generated-shared-prefix dataset: --gsp-zipf must be a finite number >= 0");
  if (o.output_len < 1) fail("generated-shared-prefix dataset: --output-len must be at least 1");
  if (o.vocab_size < 1) fail("generated-shared-prefix dataset: --vocab-size must be at least 1");
}

}  // namespace

std::vector<size_t> shared_prefix_group_counts(size_t num_prompts, size_t num_groups, double zipf_exponent) {
  std::vector<double> share(num_groups);
  for (size_t g = 0; g < num_groups; ++g) share[g] = std::pow(double(g + 1), -zipf_exponent);
  const double total = std::accumulate(share.begin(), share.end(), 0.0);
  std::vector<size_t> counts(num_groups);
  std::vector<double> remainder(num_groups);
  size_t given = 0;
  for (size_t g = 0; g < num_groups; ++g) {
    const double exact = double(num_prompts) * share[g] / total;
    counts[g] = size_t(std::floor(exact));
    remainder[g] = exact - double(counts[g]);
    given += counts[g];
  }
  std::vector<size_t> order(num_groups);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t k = 0; given < num_prompts; ++k, ++given) ++counts[order[k % num_groups]];
  return counts;
}

SharedPrefixDataset shared_prefix_dataset(const SharedPrefixOptions& o) {
  check(o);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, int32_t(std::min<int64_t>(o.vocab_size, INT32_MAX) - 1));
  SharedPrefixDataset d;
  d.system_prompts.resize(o.num_groups);
  for (auto& prompt : d.system_prompts) {
    prompt.resize(size_t(o.system_prompt_len));
    for (int32_t& id : prompt) id = token(rng);
  }

  const std::vector<size_t> counts = shared_prefix_group_counts(o.num_prompts, o.num_groups, o.zipf_exponent);
  for (size_t g = 0; g < o.num_groups; ++g) d.group_of.insert(d.group_of.end(), counts[g], g);
  std::shuffle(d.group_of.begin(), d.group_of.end(), rng);
  // Which requests get long questions is shuffled separately, so long ones fall on groups
  // in proportion to their popularity rather than on whichever group sorts first.
  const auto n_long = size_t(std::llround(double(o.num_prompts) * o.long_question_fraction));
  std::vector<bool> is_long(o.num_prompts, false);
  std::fill_n(is_long.begin(), n_long, true);
  std::shuffle(is_long.begin(), is_long.end(), rng);

  d.requests.resize(o.num_prompts);
  for (size_t i = 0; i < o.num_prompts; ++i) {
    SampleRequest& r = d.requests[i];
    const std::vector<int32_t>& prefix = d.system_prompts[d.group_of[i]];
    const int64_t question =
        draw_question_len(rng, is_long[i] ? o.long_question_len : o.question_len, o.question_range_ratio);
    r.prompt_ids.reserve(prefix.size() + size_t(question));
    r.prompt_ids.assign(prefix.begin(), prefix.end());
    for (int64_t t = 0; t < question; ++t) r.prompt_ids.push_back(token(rng));
    r.prompt_len = int64_t(r.prompt_ids.size());
    r.output_len = o.output_len;
  }
  return d;
}

}  // namespace moe::loadgen
