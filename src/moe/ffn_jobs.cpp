#include "moe/ffn_jobs.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace moe {
namespace {

// Rows of one weight matrix handled by one work item, for a phase over `total` rows: about
// four items per thread, so the dynamic hand-out balances them, each as long as that
// allows: a decode step's weights stream from memory, and every item starts a stream that
// no prefetch has run ahead of yet.
int64_t rows_per_item(int64_t total, int threads) {
  const int64_t per = (total + 4 * threads - 1) / (4 * threads);
  return std::max<int64_t>(64, (per + 15) / 16 * 16);
}

struct WorkItem {
  int32_t job;
  int64_t row_begin;
  int64_t row_end;
};

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
  int64_t rows = 0, max_ff = 0;
  for (size_t j = 0; j < n_jobs_; ++j) {
    jobs_[j].scratch_row = rows;
    rows += int64_t(jobs_[j].tokens.size());
    max_ff = std::max(max_ff, jobs_[j].w.gate.rows);
  }
  if (gathered_.size() < size_t(rows * n_embd_)) gathered_.resize(size_t(rows * n_embd_));
  if (down_.size() < size_t(rows * n_embd_)) down_.resize(size_t(rows * n_embd_));
  if (hidden_.size() < size_t(rows * max_ff)) hidden_.resize(size_t(rows * max_ff));
  if (up_.size() < size_t(rows * max_ff)) up_.resize(size_t(rows * max_ff));

  int64_t ff_rows = 0;
  for (size_t j = 0; j < n_jobs_; ++j) ff_rows += jobs_[j].w.gate.rows;
  const int64_t ff_chunk = rows_per_item(ff_rows, pool.size());
  const int64_t embd_chunk = rows_per_item(int64_t(n_jobs_) * n_embd_, pool.size());
  std::vector<WorkItem> ff_items, embd_items;
  for (size_t j = 0; j < n_jobs_; ++j) {
    for (int64_t r = 0; r < jobs_[j].w.gate.rows; r += ff_chunk) {
      ff_items.push_back({int32_t(j), r, std::min(r + ff_chunk, jobs_[j].w.gate.rows)});
    }
    for (int64_t r = 0; r < n_embd_; r += embd_chunk) {
      embd_items.push_back({int32_t(j), r, std::min(r + embd_chunk, n_embd_)});
    }
  }

  // Gather each job's tokens and convert them for its gate/up weights.
  pool.parallel_for(int64_t(n_jobs_), 1, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      Job& job = jobs_[size_t(j)];
      float* dst = gathered_.data() + job.scratch_row * n_embd_;
      for (size_t i = 0; i < job.tokens.size(); ++i) {
        std::copy_n(x + job.tokens[i] * ldx, n_embd_, dst + int64_t(i) * n_embd_);
      }
      job.in.pack(job.w.gate.type, dst, int64_t(job.tokens.size()), n_embd_, n_embd_);
      if (job.w.up.type != job.w.gate.type) {
        job.mid.pack(job.w.up.type, dst, int64_t(job.tokens.size()), n_embd_, n_embd_);
      }
    }
  });

  pool.parallel_for(int64_t(ff_items.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const WorkItem& it = ff_items[size_t(i)];
      const Job& job = jobs_[size_t(it.job)];
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
  });

  pool.parallel_for(int64_t(n_jobs_), 1, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      Job& job = jobs_[size_t(j)];
      job.mid.pack(job.w.down.type, hidden_.data() + job.scratch_row * max_ff,
                   int64_t(job.tokens.size()), job.w.gate.rows, max_ff);
    }
  });

  pool.parallel_for(int64_t(embd_items.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const WorkItem& it = embd_items[size_t(i)];
      const Job& job = jobs_[size_t(it.job)];
      matmul_rows(job.w.down, job.mid, down_.data() + job.scratch_row * n_embd_, n_embd_,
                  it.row_begin, it.row_end);
    }
  });
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
