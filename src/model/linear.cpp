#include "model/linear.h"

#include <algorithm>

#include "core/thread_pool.h"

namespace moe {
namespace {

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
  chunks_.clear();
  for (const Projection& p : ps) chunks_.add(p.w.rows);
  pool.parallel_for(chunks_.size(), 1, [&](int64_t b, int64_t e) {
    chunks_.for_rows(b, e, [&](size_t i, int64_t r0, int64_t r1) {
      const Projection& p = ps[i];
      matmul_rows(p.w, packed_[size_t(source_[i])], p.y, p.ldy, r0, r1);
    });
  });
}

void Projector::run(const QMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_tokens,
                    ThreadPool& pool) {
  one_.assign(1, Projection{w, x, ldx, y, ldy});
  run(one_, n_tokens, pool);
}

}  // namespace moe
