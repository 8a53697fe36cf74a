#include "moe/ffn_jobs.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace moe {
namespace {

// Rows of one weight matrix handled by one work item, for a matrix kind with `total` rows
// over all jobs: about eight items per thread, so that the items left when a thread runs
// out of work are short and the threads finish the phase together.
int64_t rows_per_item(int64_t total, int threads) {
  const int64_t per = (total + 8 * threads - 1) / (8 * threads);
  return std::max<int64_t>(32, (per + 15) / 16 * 16);
}

}  // namespace

void FfnRunner::reset(int64_t n_tokens, int64_t n_embd, int64_t n_extra_inputs) {
  n_tokens_ = n_tokens;
  n_inputs_ = n_tokens + n_extra_inputs;
  n_embd_ = n_embd;
  n_jobs_ = 0;
  if (int64_t(per_token_.size()) < n_tokens) per_token_.resize(size_t(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) per_token_[size_t(t)].clear();
}

int FfnRunner::find_or_add_job(const FfnWeights& w) {
  for (size_t j = 0; j < n_jobs_; ++j) {
    if (jobs_[j].w.gate.data == w.gate.data) return int(j);
  }
  if (w.gate.cols != n_embd_ || w.up.cols != n_embd_ || w.down.rows != n_embd_ ||
      w.up.rows != w.gate.rows || w.down.cols != w.gate.rows) {
    fail("ffn: inconsistent weight shapes gate [{}, {}] up [{}, {}] down [{}, {}] for width {}",
         w.gate.rows, w.gate.cols, w.up.rows, w.up.cols, w.down.rows, w.down.cols, n_embd_);
  }
  if (n_jobs_ == jobs_.size()) jobs_.emplace_back();
  Job& job = jobs_[n_jobs_];
  job.w = w;
  job.tokens.clear();
  return int(n_jobs_++);
}

FfnRunner::RowRef FfnRunner::add_input(const FfnWeights& w, int32_t input) {
  if (input < 0 || input >= n_inputs_) fail("ffn: input row {} is outside the batch of {}", input, n_inputs_);
  const int j = find_or_add_job(w);
  Job& job = jobs_[size_t(j)];
  if (job.tokens.size() >= (size_t(1) << 20)) fail("ffn: more than 2^20 tokens for one expert in one step");
  job.tokens.push_back(input);
  return {j, int32_t(job.tokens.size() - 1)};
}

void FfnRunner::add(const FfnWeights& w, int32_t token, float weight) {
  if (token < 0 || token >= n_tokens_) fail("ffn: token {} is outside the batch of {}", token, n_tokens_);
  const RowRef r = add_input(w, token);
  per_token_[size_t(token)].push_back({(r.job << 20) | r.index, weight, nullptr});
}

FfnRunner::RowRef FfnRunner::compute_only(const FfnWeights& w, int32_t input) { return add_input(w, input); }

void FfnRunner::add_external(int32_t token, float weight, const float* row) {
  if (token < 0 || token >= n_tokens_) fail("ffn: token {} is outside the batch of {}", token, n_tokens_);
  per_token_[size_t(token)].push_back({0, weight, row});
}

const float* FfnRunner::result(RowRef r) const {
  return down_.data() + (jobs_[size_t(r.job)].scratch_row + r.index) * n_embd_;
}

void FfnRunner::compute(const float* x, int64_t ldx, ThreadPool& pool) {
  int64_t rows = 0, max_ff = 0, ff_rows = 0;
  for (size_t j = 0; j < n_jobs_; ++j) {
    jobs_[j].scratch_row = rows;
    rows += int64_t(jobs_[j].tokens.size());
    max_ff = std::max(max_ff, jobs_[j].w.gate.rows);
    ff_rows += jobs_[j].w.gate.rows;
  }
  if (gathered_.size() < size_t(rows * n_embd_)) gathered_.resize(size_t(rows * n_embd_));
  if (down_.size() < size_t(rows * n_embd_)) down_.resize(size_t(rows * n_embd_));
  if (hidden_.size() < size_t(rows * max_ff)) hidden_.resize(size_t(rows * max_ff));
  if (up_.size() < size_t(rows * max_ff)) up_.resize(size_t(rows * max_ff));
  if (n_states_ < n_jobs_) {
    states_ = std::make_unique<JobState[]>(n_jobs_);
    n_states_ = n_jobs_;
  }

  // Two phases, each a parallel_for over row chunks of every job in job order, so that a
  // thread streams a contiguous share of the matrices: the gate and up rows (with
  // silu(gate) * up on them), then the down rows. The first thread to reach a job in a
  // phase converts what the job's items read: its gathered tokens, then its hidden rows.
  // (One phase whose down items waited on the gate/up items of their job, taken in turn
  // from one pile, measured 1-3% slower at one token on two cores: the wait at the
  // boundary costs about what the second dispatch does.)
  const int64_t ff_chunk = rows_per_item(ff_rows, pool.size());
  const int64_t embd_chunk = rows_per_item(int64_t(n_jobs_) * n_embd_, pool.size());
  ff_items_.clear();
  down_items_.clear();
  for (size_t j = 0; j < n_jobs_; ++j) {
    for (int64_t r = 0; r < jobs_[j].w.gate.rows; r += ff_chunk) {
      ff_items_.push_back({int32_t(j), r, std::min(r + ff_chunk, jobs_[j].w.gate.rows)});
    }
    for (int64_t r = 0; r < n_embd_; r += embd_chunk) down_items_.push_back({int32_t(j), r, std::min(r + embd_chunk, n_embd_)});
    states_[j].input.store(kNotStarted, std::memory_order_relaxed);
    states_[j].hidden.store(kNotStarted, std::memory_order_relaxed);
  }
  pool.parallel_for(int64_t(ff_items_.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) run_ff_item(ff_items_[size_t(i)], x, ldx, max_ff);
  });
  pool.parallel_for(int64_t(down_items_.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) run_down_item(down_items_[size_t(i)], max_ff);
  });
}

template <typename Fn>
void FfnRunner::once(std::atomic<int>& state, Fn&& convert) {
  int expected = kNotStarted;
  if (state.compare_exchange_strong(expected, kStarted, std::memory_order_acquire)) {
    convert();
    state.store(kReady, std::memory_order_release);
  } else {
    ThreadPool::wait_until([&] { return state.load(std::memory_order_acquire) == kReady; });
  }
}

void FfnRunner::run_ff_item(const WorkItem& it, const float* x, int64_t ldx, int64_t max_ff) {
  Job& job = jobs_[size_t(it.job)];
  once(states_[size_t(it.job)].input, [&] { prepare_input(job, x, ldx); });
  float* gate = hidden_.data() + job.scratch_row * max_ff;
  float* up = up_.data() + job.scratch_row * max_ff;
  matmul_rows(job.w.gate, job.in, gate, max_ff, it.row_begin, it.row_end);
  const PackedActs& up_in = job.w.up.type == job.w.gate.type ? job.in : job.mid;
  matmul_rows(job.w.up, up_in, up, max_ff, it.row_begin, it.row_end);
  for (size_t t = 0; t < job.tokens.size(); ++t) {
    float* g = gate + int64_t(t) * max_ff + it.row_begin;
    swiglu(g, up + int64_t(t) * max_ff + it.row_begin, g, it.row_end - it.row_begin);
  }
}

void FfnRunner::run_down_item(const WorkItem& it, int64_t max_ff) {
  Job& job = jobs_[size_t(it.job)];
  once(states_[size_t(it.job)].hidden, [&] {
    job.mid.pack(job.w.down.type, hidden_.data() + job.scratch_row * max_ff, int64_t(job.tokens.size()),
                 job.w.gate.rows, max_ff);
  });
  matmul_rows(job.w.down, job.mid, down_.data() + job.scratch_row * n_embd_, n_embd_, it.row_begin, it.row_end);
}

void FfnRunner::prepare_input(Job& job, const float* x, int64_t ldx) {
  float* dst = gathered_.data() + job.scratch_row * n_embd_;
  for (size_t i = 0; i < job.tokens.size(); ++i) {
    std::copy_n(x + job.tokens[i] * ldx, n_embd_, dst + int64_t(i) * n_embd_);
  }
  job.in.pack(job.w.gate.type, dst, int64_t(job.tokens.size()), n_embd_, n_embd_);
  if (job.w.up.type != job.w.gate.type) {
    job.mid.pack(job.w.up.type, dst, int64_t(job.tokens.size()), n_embd_, n_embd_);
  }
}

void FfnRunner::combine(float* out, int64_t ldo, ThreadPool& pool) {
  pool.parallel_for(n_tokens_, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = out + t * ldo;
      std::fill_n(o, n_embd_, 0.0f);
      for (const Contribution& c : per_token_[size_t(t)]) {
        const float* d = c.external ? c.external : result({c.row >> 20, c.row & 0xfffff});
        for (int64_t i = 0; i < n_embd_; ++i) o[i] += c.weight * d[i];
      }
    }
  });
}

}  // namespace moe
