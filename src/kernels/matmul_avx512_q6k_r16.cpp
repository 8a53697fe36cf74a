// AVX-512 VNNI kernel for q6_K_r16 weights (16 rows regrouped per super-block column, see
// kernels/q6_k_r16.h) against q8 activations with one scale per 256 values.
//
// Per super-block column of a group: the 16 rows' scales are widened once into int16 pairs
// (for the -32 offset) and int32 lanes (for the sub-block sums), shared by the tile's
// tokens. Per 64 bytes of low bits: two masks, each completed with two bits of a
// high-bit vector (one such vector serves two of low bits), give four codes of two
// sub-blocks for each of the 16 rows, and per token two vpdpbusd with the token's four
// codes broadcast. Each 16-value sub-block's integer sum is multiplied by the rows' scale
// and added up; the codes' +32 is taken off with eight vpdpwssd of the scale pairs against
// the token's 16-value code sums. Then one conversion and multiply-add per token with
// d * d_a. Lane j ends as row j's result: no reduction across lanes.
//
// The integer sums cannot overflow: a sub-block's is at most 16 * 63 * 127, times a scale
// of at most 128, and sixteen of them with the offset stay below 2^31.
//
// A (row, token) is summed over the super-blocks in order with one accumulator whatever
// the tile, so a token's result is bit-identical alone or in a batch.
// GCC 12's AVX-512 headers build "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/matmul_r16.h"
#include "kernels/q6_k_r16.h"

namespace moe::mm {
namespace {

// As for q4_K_r16 (see matmul_avx512_q4k_r16.cpp): about 400 instructions per 3360-byte
// column at one token, so the first tile over a group asks for the weights ahead.
constexpr int64_t kPrefetchAhead = 2 * int64_t(kQ6KR16BlockBytes);


// acc += pairs of int16 w . the two int16 at p broadcast to every lane.
MOE_AVX512_INLINE __m512i dpwssd_bcast2(__m512i acc, __m512i w, const int16_t* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

template <int T>
MOE_AVX512 void group_tile(const uint8_t* g, int64_t nsb, const Q8x256View* a, float* y, int64_t ldy, __mmask16 keep,
                           bool prefetch) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nsb; ++b) {
    const uint8_t* col = g + b * int64_t(kQ6KR16BlockBytes);
    if (prefetch) {
      for (size_t l = 0; l < kQ6KR16BlockBytes; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(col + kPrefetchAhead + l), _MM_HINT_T0);
      }
    }
    __m512i tot[T], off[T];
    for (int t = 0; t < T; ++t) tot[t] = off[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      // Scale pairs (sc[2i], sc[2i+1]) of sub-blocks 4p..4p+3, i = 2p and 2p + 1.
      const __m512i pair0 =
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col + 32 + 64 * p)));
      const __m512i pair1 =
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col + 64 + 64 * p)));
      const __m512i sc[4] = {_mm512_srai_epi32(_mm512_slli_epi32(pair0, 16), 16), _mm512_srai_epi32(pair0, 16),
                             _mm512_srai_epi32(_mm512_slli_epi32(pair1, 16), 16), _mm512_srai_epi32(pair1, 16)};
      __m512i s[T][4];
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j < 4; ++j) s[t][j] = _mm512_setzero_si512();
        const int16_t* bs = a[t].bsums + 16 * b + 4 * p;
        off[t] = dpwssd_bcast2(dpwssd_bcast2(off[t], pair0, bs), pair1, bs + 2);
      }
      const uint8_t* low = col + 288 + 512 * p;
      const uint8_t* high = col + 2336 + 256 * p;
#pragma GCC unroll 4
      for (int w = 0; w < 4; ++w) {
        const __m512i h = load512(high + 64 * w);
        const __m512i l0 = load512(low + 64 * w), l1 = load512(low + 64 * (w + 4));
        // Codes 4w..4w+3 of sub-blocks 4p (even0) and 4p + 2 (odd0), and of 4p + 1 (even1)
        // and 4p + 3 (odd1).
        const __m512i even0 =
            _mm512_or_si512(_mm512_and_si512(l0, low4), _mm512_and_si512(_mm512_slli_epi16(h, 4), bits45));
        const __m512i odd0 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), low4),
                                             _mm512_and_si512(_mm512_slli_epi16(h, 2), bits45));
        const __m512i even1 = _mm512_or_si512(_mm512_and_si512(l1, low4), _mm512_and_si512(h, bits45));
        const __m512i odd1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), low4),
                                             _mm512_and_si512(_mm512_srli_epi16(h, 2), bits45));
        for (int t = 0; t < T; ++t) {
          const int8_t* q = a[t].qs + 256 * b + 64 * p + 4 * w;
          s[t][0] = dpbusd_bcast4(s[t][0], even0, q);
          s[t][1] = dpbusd_bcast4(s[t][1], even1, q + 16);
          s[t][2] = dpbusd_bcast4(s[t][2], odd0, q + 32);
          s[t][3] = dpbusd_bcast4(s[t][3], odd1, q + 48);
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m512i s01 = _mm512_add_epi32(_mm512_mullo_epi32(s[t][0], sc[0]), _mm512_mullo_epi32(s[t][1], sc[1]));
        const __m512i s23 = _mm512_add_epi32(_mm512_mullo_epi32(s[t][2], sc[2]), _mm512_mullo_epi32(s[t][3], sc[3]));
        tot[t] = _mm512_add_epi32(tot[t], _mm512_add_epi32(s01, s23));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
    for (int t = 0; t < T; ++t) {
      const __m512i sum = _mm512_sub_epi32(tot[t], _mm512_slli_epi32(off[t], 5));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, _mm512_set1_ps(a[t].d[b])), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy, keep, acc[t]);
}

struct Q6_KR16 : R16Acts256 {
  static constexpr int kMaxTokens = 3;
  template <int T>
  static void tile(const uint8_t* g, int64_t nsb, const View* a, float* y, int64_t ldy, __mmask16 keep, bool first) {
    group_tile<T>(g, nsb, a, y, ldy, keep, first);
  }
};

}  // namespace

RowsFn avx512_rows_q6_K_r16() { return r16_rows<Q6_KR16>; }

}  // namespace moe::mm
