// AVX-512 VNNI kernel for q8_0_r16 weights (16 rows regrouped per block column, see
// kernels/q8_0_r16.h) against q8 activations.
//
// Per block column of a group and per token: eight vpdpbusd, each the 16 rows' unsigned
// codes (one 64-byte load, shared by the tile's tokens) against four of the token's codes
// broadcast to all lanes, into two integer sums (even and odd chunks, so the dependency
// chains are four long), the first starting at -128 * (sum of the token's block codes) to
// undo the weights' +128. Their sum, converted to float, is accumulated with the scale
// products d_w (16 lanes: the rows) * d_a. Lane j ends as row j's result: no reduction
// across lanes.
//
// At one token the kernel streams weights from memory, and the fewer instructions it
// spends per byte the further ahead of the arithmetic its loads run: the broadcasts are
// folded into the vpdpbusd ({1to16} memory operands, which GCC 12 does not emit from the
// intrinsics) and the -128 * sum start is a precomputed broadcast, about 25 instructions
// per block column instead of 45. Measured on two Zen 5 cores: a 2048x2048 GEMV from
// memory 7-10% faster.
//
// A (row, token) is summed over the blocks in order with one accumulator whatever the
// tile, so a token's result is bit-identical alone or in a batch.
// GCC 12's AVX-512 headers build "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>

#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/q8_0_r16.h"

namespace moe::mm {
namespace {

constexpr int kMaxTokens = 16;

// The T tokens of `a` against the group starting at `g` (a pointer to its first block
// column), into y (the first token's row) and rows ldy apart; lanes in `keep` are stored.
template <int T>
MOE_AVX512 void group_tile(const uint8_t* g, int64_t nb, const Q8x32View* a, float* y, int64_t ldy, __mmask16 keep) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * int64_t(kR16BlockBytes);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    __m512i wv[8];
    for (int c = 0; c < 8; ++c) wv[c] = _mm512_loadu_si512(blk + 32 + 64 * c);
    for (int t = 0; t < T; ++t) {
      const int8_t* q = a[t].qs + 32 * b;
      __m512i even = _mm512_set1_epi32(a[t].o[b]);
      __m512i odd = _mm512_setzero_si512();
      for (int c = 0; c < 8; c += 2) {
        even = dpbusd_bcast4(even, wv[c], q + 4 * c);
        odd = dpbusd_bcast4(odd, wv[c + 1], q + 4 * c + 4);
      }
      const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(a[t].d[b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy, keep, acc[t]);
}

template <int T>
void tail_tile(const uint8_t* g, int64_t nb, const Q8x32View* a, int64_t n, float* y, int64_t ldy, __mmask16 keep) {
  if constexpr (T >= 1) {
    if (n == T) return group_tile<T>(g, nb, a, y, ldy, keep);
    tail_tile<T - 1>(g, nb, a, n, y, ldy, keep);
  }
}

// Rows [r0, r1): every group they touch is computed whole, and only their rows stored.
// Tokens go in blocks of 64 (their codes stay in L2) and, within one, in tiles of up to
// kMaxTokens that share each block column's weight loads. The tokens' views are found
// once per block of tokens, not per group: with short rows (a head's 128-wide W_kb has 4
// block columns per group) that made a cache-resident GEMV 2-8% faster.
void rows_q8_0_r16(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = w.cols / 32, nt = x.n_tokens();
  const int64_t g0 = r0 / kR16Rows, g1 = (r1 + kR16Rows - 1) / kR16Rows;
  auto keep = [&](int64_t g) {
    const int64_t lo = std::max(r0, g * kR16Rows) - g * kR16Rows, hi = std::min(r1, (g + 1) * kR16Rows) - g * kR16Rows;
    return __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
  };
  Q8x32View views[64];
  for (int64_t t0 = 0; t0 < nt; t0 += 64) {
    const int64_t t1 = std::min(nt, t0 + 64);
    for (int64_t t = t0; t < t1; ++t) views[t - t0] = q8x32_view(x, t);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* grp = w.row(g * kR16Rows);
      const __mmask16 k = keep(g);
      float* yg = y + g * kR16Rows;
      int64_t t = t0;
      for (; t + kMaxTokens <= t1; t += kMaxTokens) group_tile<kMaxTokens>(grp, nb, views + (t - t0), yg + t * ldy, ldy, k);
      if (t < t1) tail_tile<kMaxTokens - 1>(grp, nb, views + (t - t0), t1 - t, yg + t * ldy, ldy, k);
    }
  }
}

}  // namespace

RowsFn avx512_rows_q8_0_r16() { return rows_q8_0_r16; }

}  // namespace moe::mm
