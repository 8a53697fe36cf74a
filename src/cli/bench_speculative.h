#pragma once
// bench model's speculative decoding run: requests decoded together by the serving engine,
// without drafts and then with them, timed over the decode steps after every first token
// while every request still decodes.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/speculative.h"
#include "kernels/kv_format.h"

namespace moe {
class Model;
class Tokenizer;
class ThreadPool;
}  // namespace moe

namespace moe::cli {

struct SpecDecodeRun {
  double tokens_per_s = 0;  // decode tokens/s after the first token
  int64_t tokens = 0;       // decoded after the first token, all requests
  int64_t steps = 0;        // each request's steps that decoded them, summed
  int64_t drafted = 0, accepted = 0;
  double weight_bytes = 0;  // read by those steps (Model::last_step_weight_bytes)
  double weight_bytes_per_token() const { return tokens > 0 ? weight_bytes / double(tokens) : 0.0; }
  double tokens_per_step() const { return steps > 0 ? double(tokens) / double(steps) : 0.0; }
};

// A pair of runs, without and with drafts, back to back: on a shared machine the ratio of
// two runs seconds apart is steadier than either rate.
struct SpecDecodeBench {
  SpecDecodeRun plain, speculative;
  double speedup = 0;                       // speculative over plain tokens/s
  double speedup_min = 0, speedup_max = 0;  // over the pairs measured
};

// Each prompt followed by its greedy continuation of n tokens (decoded together, untimed).
std::vector<std::vector<int32_t>> echoed_prompts(Model& model, const Tokenizer& tok, KvDtype kv_dtype,
                                                 const std::vector<std::vector<int32_t>>& prompts, int n, ThreadPool& pool);

// The prompts' greedy continuations of tg tokens, decoded together (one request per prompt,
// all prompts of one length) by the engine without drafts and then with spec's. With
// draft_acceptance A the drafter's proposals are replaced by the continuation found without
// drafts, each drafted token right with probability A (a fixed seed); the drafter still
// runs, so an MTP layer's cost is paid. The two runs' tokens must be equal (else
// moe::Error). reps pairs are run; the one of median speedup is returned, with the range
// of all; progress gets the fraction done after each pair.
SpecDecodeBench bench_speculative_decode(Model& model, const Tokenizer& tok, KvDtype kv_dtype, const SpeculativeConfig& spec,
                                         std::optional<double> draft_acceptance, const std::vector<std::vector<int32_t>>& prompts,
                                         int tg, int reps, ThreadPool& pool, const std::function<void(double)>& progress);

}  // namespace moe::cli
