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

#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/matmul_r16.h"
#include "kernels/q8_0_r16.h"

namespace moe::mm {
namespace {

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

struct Q8_0R16 : R16Acts32 {
  static constexpr int kMaxTokens = 16;
  // At one token the hardware prefetchers follow the group's single stream well here: a
  // software prefetch measured slower, so `first` goes unused.
  template <int T>
  static void tile(const uint8_t* g, int64_t nb, const View* a, float* y, int64_t ldy, __mmask16 keep, bool) {
    group_tile<T>(g, nb, a, y, ldy, keep);
  }
};

}  // namespace

RowsFn avx512_rows_q8_0_r16() { return r16_rows<Q8_0R16>; }

}  // namespace moe::mm
