#pragma once
// Runs many SwiGLU feed-forward networks over subsets of a batch's tokens in a few
// parallel phases: every routed expert of an MoE layer (each on the tokens routed to it,
// gathered so its weights stream from memory once for all of them), the shared experts and
// dense FFNs (all tokens). Outputs are accumulated per token in a fixed order (the order
// the jobs' contributions were added for that token), so a token's result does not depend
// on which other tokens share the batch.
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace moe {

class ThreadPool;

struct FfnWeights {
  QMatrix gate;  // [n_ff, n_embd]
  QMatrix up;    // [n_ff, n_embd]
  QMatrix down;  // [n_embd, n_ff]
};

class FfnRunner {
 public:
  // Starts a new batch of jobs over n_tokens tokens with rows of n_embd floats.
  void reset(int64_t n_tokens, int64_t n_embd);
  // Adds `weight * ffn(x[token])` to token's output; contributions to a token are summed
  // in the order they were added.
  void add(const FfnWeights& w, int32_t token, float weight);
  // x: f32 [n_tokens, n_embd] (rows ldx apart); out: f32 [n_tokens, n_embd] (rows ldo
  // apart) receives the sums (overwritten, not accumulated).
  void run(const float* x, int64_t ldx, float* out, int64_t ldo, ThreadPool& pool);

 private:
  struct Job {
    FfnWeights w;
    std::vector<int32_t> tokens;
    int64_t scratch_row = 0;  // first row of this job's tokens in the scratch buffers
    PackedActs in;
    PackedActs mid;
  };
  struct Contribution {
    int32_t row;  // scratch row holding the job's output for the token
    float weight;
  };
  int find_or_add_job(const FfnWeights& w);

  int64_t n_tokens_ = 0;
  int64_t n_embd_ = 0;
  std::vector<Job> jobs_;
  size_t n_jobs_ = 0;
  std::vector<std::vector<Contribution>> per_token_;
  std::vector<float> gathered_;  // [rows, n_embd]
  std::vector<float> hidden_;    // [rows, max n_ff] gate, then silu(gate)*up
  std::vector<float> up_;        // [rows, max n_ff]
  std::vector<float> down_;      // [rows, n_embd]
};

}  // namespace moe
