#pragma once
// Runs many SwiGLU feed-forward networks over subsets of a batch's tokens in two parallel
// phases (gate/up rows of all of them, then down rows): every routed expert of an MoE layer (each on the tokens routed to it,
// gathered so its weights stream from memory once for all of them), the shared experts and
// dense FFNs (all tokens). Outputs are accumulated per token in a fixed order (the order
// the jobs' contributions were added for that token), so a token's result does not depend
// on which other tokens share the batch.
//
// Under expert parallelism some of a token's experts run on other ranks: their rows come
// back as external contributions, summed in the same order as local ones, and the rows
// this rank computes for other ranks' tokens are read back by handle after compute().
#include <atomic>
#include <cstdint>
#include <memory>
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
  // Starts a new batch of jobs over n_tokens tokens with rows of n_embd floats; inputs
  // n_tokens .. n_tokens + n_extra_inputs - 1 are rows that only compute_only() reads.
  void reset(int64_t n_tokens, int64_t n_embd, int64_t n_extra_inputs = 0);
  // Adds `weight * ffn(x[token])` to token's output; contributions to a token are summed
  // in the order they were added.
  void add(const FfnWeights& w, int32_t token, float weight);
  // Where one input row's unweighted ffn output lies once compute() ran.
  struct RowRef {
    int32_t job;
    int32_t index;
  };
  // Has ffn(x[input]) computed without adding it to any output (the row is another rank's).
  RowRef compute_only(const FfnWeights& w, int32_t input);
  // Adds `weight * row[0..n_embd)` to token's output, in order with add(): a row computed
  // elsewhere, which must hold its values when combine() runs.
  void add_external(int32_t token, float weight, const float* row);

  // x: f32 [n_tokens + n_extra_inputs, n_embd] (rows ldx apart); out: f32 [n_tokens,
  // n_embd] (rows ldo apart) receives the sums (overwritten, not accumulated).
  void run(const float* x, int64_t ldx, float* out, int64_t ldo, ThreadPool& pool) {
    compute(x, ldx, pool);
    combine(out, ldo, pool);
  }
  // run() in two halves, with result() readable between them.
  void compute(const float* x, int64_t ldx, ThreadPool& pool);
  const float* result(RowRef r) const;
  void combine(float* out, int64_t ldo, ThreadPool& pool);

 private:
  struct Job {
    FfnWeights w;
    std::vector<int32_t> tokens;
    int64_t scratch_row = 0;  // first row of this job's tokens in the scratch buffers
    PackedActs in;
    PackedActs mid;
  };
  struct Contribution {
    int32_t row;  // (job << 20) | index of the token in the job
    float weight;
    const float* external;  // instead of a job's row, when set
  };
  // A conversion one job needs before a phase's items of it can run (its tokens, its
  // hidden rows): the first thread to reach the job does it, the others wait for it.
  static constexpr int kNotStarted = 0, kStarted = 1, kReady = 2;
  struct JobState {
    std::atomic<int> input{kNotStarted};
    std::atomic<int> hidden{kNotStarted};
  };
  // Runs convert() on the first thread to arrive; the others wait until it is done.
  template <typename Fn>
  static void once(std::atomic<int>& state, Fn&& convert);
  struct WorkItem {
    int32_t job;
    int64_t row_begin;
    int64_t row_end;
  };
  int find_or_add_job(const FfnWeights& w);
  void prepare_input(Job& job, const float* x, int64_t ldx);
  void run_ff_item(const WorkItem& it, const float* x, int64_t ldx, int64_t max_ff);
  void run_down_item(const WorkItem& it, int64_t max_ff);
  RowRef add_input(const FfnWeights& w, int32_t input);

  int64_t n_tokens_ = 0;
  int64_t n_inputs_ = 0;
  int64_t n_embd_ = 0;
  std::vector<Job> jobs_;
  size_t n_jobs_ = 0;
  std::vector<std::vector<Contribution>> per_token_;
  std::vector<float> gathered_;  // [rows, n_embd]
  std::vector<float> hidden_;    // [rows, max n_ff] gate, then silu(gate)*up
  std::vector<float> up_;        // [rows, max n_ff]
  std::vector<float> down_;      // [rows, n_embd]
  std::unique_ptr<JobState[]> states_;
  size_t n_states_ = 0;
  std::vector<WorkItem> ff_items_;    // gate/up rows of every job, in job order
  std::vector<WorkItem> down_items_;  // down rows of every job, in job order
};

}  // namespace moe
