#include "model/linear.h"

#include <algorithm>

#include "core/thread_pool.h"

namespace moe {
namespace {

struct Chunk {
  int32_t proj;
  int64_t row_begin;
  int64_t row_end;
};

// Enough chunks to keep every thread busy, each a run of rows streamed contiguously.
int64_t chunk_rows(const std::vector<Projection>& ps, int n_threads) {
  int64_t total = 0;
  for (const auto& p : ps) total += p.w.rows;
  const int64_t target = std::max<int64_t>(16, total / (int64_t(n_threads) * 8));
  return (target + 15) / 16 * 16;
}

// Below this many input floats in all (a few microseconds of conversion), converting them on
// the calling thread costs less than a pool dispatch: a one-token decode step's projections.
constexpr int64_t kInlinePackFloats = 1 << 13;

}  // namespace

void Projector::run(const std::vector<Projection>& ps, int64_t n_tokens, ThreadPool& pool) {
  if (packed_.size() < ps.size()) packed_.resize(ps.size());
  // Projections of the same input (a layer's query and key/value projections) share one
  // conversion where their weight types take the same activation format.
  source_.resize(ps.size());
  int64_t floats = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    source_[i] = int32_t(i);
    for (size_t j = 0; j < i; ++j) {
      if (source_[j] == int32_t(j) && ps[j].x == ps[i].x && ps[j].ldx == ps[i].ldx && ps[j].w.cols == ps[i].w.cols) {
        source_[i] = int32_t(j);
        break;
      }
    }
    if (source_[i] == int32_t(i)) floats += n_tokens * ps[i].w.cols;
  }
  auto pack = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Projection& p = ps[size_t(i)];
      if (source_[size_t(i)] == i) packed_[size_t(i)].pack(p.w.type, p.x, n_tokens, p.w.cols, p.ldx);
    }
  };
  if (floats <= kInlinePackFloats) {
    pack(0, int64_t(ps.size()));
  } else {
    pool.parallel_for(int64_t(ps.size()), 1, pack);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    if (source_[i] != int32_t(i) && !packed_[size_t(source_[i])].fits(ps[i].w.type)) {
      packed_[i].pack(ps[i].w.type, ps[i].x, n_tokens, ps[i].w.cols, ps[i].ldx, pool);
      source_[i] = int32_t(i);
    }
  }
  const int64_t step = chunk_rows(ps, pool.size());
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < ps.size(); ++i) {
    for (int64_t r = 0; r < ps[i].w.rows; r += step) {
      chunks.push_back({int32_t(i), r, std::min(r + step, ps[i].w.rows)});
    }
  }
  pool.parallel_for(int64_t(chunks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Chunk& c = chunks[size_t(i)];
      const Projection& p = ps[size_t(c.proj)];
      matmul_rows(p.w, packed_[size_t(source_[size_t(c.proj)])], p.y, p.ldy, c.row_begin, c.row_end);
    }
  });
}

void Projector::run(const QMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens,
                    ThreadPool& pool) {
  one_.assign(1, Projection{w, x, ldx, y, ldy});
  run(one_, n_tokens, pool);
}

}  // namespace moe
