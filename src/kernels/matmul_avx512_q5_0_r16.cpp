// AVX-512 VNNI kernel for q5_0_r16 weights (16 rows regrouped per block column, see
// kernels/q5_0_r16.h) against q8 activations with one scale per 32 values.
//
// Per block column of a group: the fifth-bit vector is loaded once; each of the four
// vectors of low bits, masked and completed with one shifted fifth bit, gives four codes
// of the first half of the block and four of the second for each of the 16 rows, and per
// token two vpdpbusd with the token's four codes broadcast, into two integer sums (the
// first starting at -16 * the token's block code sum, for the codes' +16). Their sum,
// converted, is accumulated with d_w * d_a. Lane j ends as row j's result.
//
// A (row, token) is summed over the blocks in order with one accumulator whatever the
// tile, so a token's result is bit-identical alone or in a batch.
// GCC 12's AVX-512 headers build "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/matmul_r16.h"
#include "kernels/q5_0_r16.h"

namespace moe::mm {
namespace {

// About 56 instructions per 352-byte column at one token: as for q4_K_r16 (see
// matmul_avx512_q4k_r16.cpp) the first tile over a group asks for the weights ahead.
constexpr int64_t kPrefetchAhead = 8 * int64_t(kQ5_0R16BlockBytes);


template <int T>
MOE_AVX512 void group_tile(const uint8_t* g, int64_t nb, const Q8x32View* a, float* y, int64_t ldy, __mmask16 keep,
                           bool prefetch) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* col = g + b * int64_t(kQ5_0R16BlockBytes);
    if (prefetch) {
      for (size_t l = 0; l < kQ5_0R16BlockBytes; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(col + kPrefetchAhead + l), _MM_HINT_T0);
      }
    }
    const __m512i h = load512(col + 32);
    __m512i first[T], second[T];
    for (int t = 0; t < T; ++t) {
      first[t] = _mm512_set1_epi32(-16 * a[t].s[b]);
      second[t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i l = load512(col + 96 + 64 * v);
      // Fifth bits: bit v for codes 4v.., bit 4 + v for codes 16 + 4v.., both moved to bit 4.
      const __m512i lo =
          _mm512_or_si512(_mm512_and_si512(l, low4), _mm512_and_si512(_mm512_slli_epi16(h, 4 - v), bit4));
      const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                                         _mm512_and_si512(_mm512_srli_epi16(h, v), bit4));
      for (int t = 0; t < T; ++t) {
        const int8_t* q = a[t].qs + 32 * b + 4 * v;
        first[t] = dpbusd_bcast4(first[t], lo, q);
        second[t] = dpbusd_bcast4(second[t], hi, q + 16);
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
    for (int t = 0; t < T; ++t) {
      const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(a[t].d[b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(first[t], second[t])), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy, keep, acc[t]);
}

struct Q5_0R16 : R16Acts32 {
  static constexpr int kMaxTokens = 6;
  template <int T>
  static void tile(const uint8_t* g, int64_t nb, const View* a, float* y, int64_t ldy, __mmask16 keep, bool first) {
    group_tile<T>(g, nb, a, y, ldy, keep, first);
  }
};

}  // namespace

RowsFn avx512_rows_q5_0_r16() { return r16_rows<Q5_0R16>; }

}  // namespace moe::mm
