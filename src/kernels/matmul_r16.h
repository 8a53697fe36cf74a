#pragma once
// The row-range loop the kernels of the regrouped types (kernels/regrouped.h) share: the
// 16-row groups a range touches, the tokens in blocks of 64 (their codes stay in L2) and,
// within one, in tiles of up to K::kMaxTokens that share each column's weight loads. The
// tokens' views are found once per block of tokens, not per group: with short rows (a
// head's 128-wide W_kb has 4 block columns per group) that made a cache-resident GEMV 2-8%
// faster.
//
// K describes a kernel; it derives from R16Acts32 or R16Acts256 (below) for the first three:
//   using View;                       // Q8x32View or Q8x256View
//   static View view(const PackedActs&, int64_t token);
//   static constexpr int64_t kBlock;  // values per weight column of a group
//   static constexpr int kMaxTokens;
//   template <int T> static void tile(const uint8_t* group, int64_t n_columns, const View* a,
//                                     float* y, int64_t ldy, __mmask16 keep, bool first);
// tile() computes a whole group for T tokens and stores the rows in `keep`; `first` is set
// for the first tile over a group in a block of tokens, the one that brings its weights
// from memory (the others find them in L1).
#include <algorithm>
#include <cstdint>

#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/regrouped.h"

namespace moe::mm {

// The activations of weights in blocks of 32 (q8_0, q5_0) and in super-blocks of 256 (the
// k-quants).
struct R16Acts32 {
  using View = Q8x32View;
  static View view(const PackedActs& x, int64_t t) { return q8x32_view(x, t); }
  static constexpr int64_t kBlock = 32;
};
struct R16Acts256 {
  using View = Q8x256View;
  static View view(const PackedActs& x, int64_t t) { return q8x256_view(x, t); }
  static constexpr int64_t kBlock = 256;
};

template <class K, int T>
void r16_tail_tile(const uint8_t* g, int64_t nc, const typename K::View* a, int64_t n, float* y, int64_t ldy,
                   __mmask16 keep, bool first) {
  if constexpr (T >= 1) {
    if (n == T) return K::template tile<T>(g, nc, a, y, ldy, keep, first);
    r16_tail_tile<K, T - 1>(g, nc, a, n, y, ldy, keep, first);
  }
}

// Rows [r0, r1): every group they touch is computed whole, and only their rows stored.
template <class K>
void r16_rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nc = w.cols / K::kBlock, nt = x.n_tokens();
  const int64_t g0 = r0 / kR16Rows, g1 = (r1 + kR16Rows - 1) / kR16Rows;
  auto keep = [&](int64_t g) {
    const int64_t lo = std::max(r0, g * kR16Rows) - g * kR16Rows, hi = std::min(r1, (g + 1) * kR16Rows) - g * kR16Rows;
    return __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
  };
  typename K::View views[64];
  for (int64_t t0 = 0; t0 < nt; t0 += 64) {
    const int64_t t1 = std::min(nt, t0 + 64);
    for (int64_t t = t0; t < t1; ++t) views[t - t0] = K::view(x, t);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* grp = w.row(g * kR16Rows);
      const __mmask16 k = keep(g);
      float* yg = y + g * kR16Rows;
      int64_t t = t0;
      for (; t + K::kMaxTokens <= t1; t += K::kMaxTokens) {
        K::template tile<K::kMaxTokens>(grp, nc, views + (t - t0), yg + t * ldy, ldy, k, t == t0);
      }
      if (t < t1) r16_tail_tile<K, K::kMaxTokens - 1>(grp, nc, views + (t - t0), t1 - t, yg + t * ldy, ldy, k, t == t0);
    }
  }
}

}  // namespace moe::mm
