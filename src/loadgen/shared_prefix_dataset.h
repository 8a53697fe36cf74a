#pragma once
// Prompts that share system prompts, like SGLang's "generated-shared-prefix" dataset: the
// workload where routing by prefix matters. G groups each have a system prompt of
// random token ids; every request is its group's system prompt followed by a question of
// random token ids of its own. Questions are mostly short, with an optional fraction of
// long ones, so prefill costs differ by request as well as by cache hit. Groups may be
// unequally popular (Zipf-like), so that one prefix is hot and the rest share what is left.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "loadgen/dataset.h"

namespace moe::loadgen {

struct SharedPrefixOptions {
  size_t num_prompts = 0;
  size_t num_groups = 0;
  int64_t system_prompt_len = 0;
  // Questions are drawn uniformly from [len * (1 - r), len * (1 + r)] (at least 1 token);
  // round(num_prompts * long_question_fraction) of them use long_question_len instead.
  int64_t question_len = 0;
  double question_range_ratio = 0;
  int64_t long_question_len = 0;
  double long_question_fraction = 0;
  int64_t output_len = 0;
  // Group g (0-based) has popularity 1 / (g + 1)^zipf_exponent; 0 makes all groups equal.
  double zipf_exponent = 0;
  int64_t vocab_size = 256;
  uint64_t seed = 0;
};

struct SharedPrefixDataset {
  std::vector<SampleRequest> requests;             // in the order they are sent
  std::vector<size_t> group_of;                    // each request's group
  std::vector<std::vector<int32_t>> system_prompts;  // one per group
};

// How many of num_prompts requests each group gets: the Zipf shares apportioned by the
// largest remainder (each count is the floor or the ceiling of its exact share, ties to the
// more popular group), so the split is exact rather than sampled.
std::vector<size_t> shared_prefix_group_counts(size_t num_prompts, size_t num_groups, double zipf_exponent);

// Throws moe::Error naming the offending flag (--gsp-...) for invalid options. The same
// options give the same dataset; the order of requests is shuffled by the seed.
SharedPrefixDataset shared_prefix_dataset(const SharedPrefixOptions& o);

}  // namespace moe::loadgen
