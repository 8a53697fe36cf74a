// AVX-512 VNNI kernel for q4_K_r16 weights (16 rows regrouped per super-block column, see
// kernels/q4_k_r16.h) against q8 activations with one scale per 256 values.
//
// Per super-block column of a group: the 16 rows' scales and mins are unpacked into byte
// vectors once, shared by the tile's tokens. Per sub-block pair and token: sixteen
// vpdpbusd, each one 64-byte load of codes (masked with 0x0f for the even sub-block, with
// 0xf0 for the odd one, which gives its codes times 16) against four of the token's codes
// broadcast to every lane, into two integer sums that are multiplied by the rows' 6-bit
// scales (16 times the even sub-block's, so both carry the factor 16) and added up. The
// mins are four vpdpwssd of the rows' min pairs against the token's sub-block code sums.
// Then per token one conversion and multiply-add for the sums (with d / 16) and one for
// the mins (with dmin). Lane j ends as row j's result: no reduction across lanes.
//
// The integer sums cannot overflow: a sub-block's is at most 32 * 15 * 127 times 16 at
// most 1008 (16 times a 6-bit scale), about 62 million, and eight of them stay below
// 2^31.
//
// A (row, token) is summed over the super-blocks in order with one accumulator whatever
// the tile, so a token's result is bit-identical alone or in a batch. GCC 12's AVX-512
// headers build "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/matmul_r16.h"
#include "kernels/q4_k_r16.h"

namespace moe::mm {
namespace {

// How far ahead of the column being computed the first tile over a group asks for the
// weights. With about 230 instructions per 2304-byte column the out-of-order window holds
// only two columns' loads, too few to keep a core's memory requests in flight: a GEMV
// from memory ran at 55-60% of the prefetched speed without it (two Zen 5 cores). Three
// columns ahead measured best of 1-12.
constexpr int64_t kPrefetchAhead = 3 * int64_t(kQ4KR16BlockBytes);


// The four 32-bit lanes j%4 of a byte vector holding sub-blocks j (16 bytes each: the
// rows), widened to int32 lanes, one per row.
MOE_AVX512_INLINE __m512i rows_of(__m512i bytes, int j) {
  switch (j % 4) {
    case 0:
      return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(bytes));
    case 1:
      return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(bytes, 1));
    case 2:
      return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(bytes, 2));
    default:
      return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(bytes, 3));
  }
}

// The T tokens of `a` against the group starting at `g`, into y (the first token's row)
// and rows ldy apart; lanes in `keep` are stored.
template <int T>
MOE_AVX512 void group_tile(const uint8_t* g, int64_t nsb, const Q8x256View* a, float* y, int64_t ldy, __mmask16 keep,
                           bool prefetch) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8(char(0xf0)), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nsb; ++b) {
    const uint8_t* col = g + b * int64_t(kQ4KR16BlockBytes);
    if (prefetch) {
      for (size_t l = 0; l < kQ4KR16BlockBytes; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(col + kPrefetchAhead + l), _MM_HINT_T0);
      }
    }
    // Scales: S0 (sub-blocks 0-3) and S1 (4-7), one byte per (sub-block, row); mins M0,
    // M1 in row pairs (q4_k_r16.cpp).
    const __m512i ls = load512(col + 64), lm = load512(col + 128), hi = load512(col + 192);
    const __m512i s0 = _mm512_or_si512(_mm512_and_si512(ls, low4), _mm512_and_si512(_mm512_slli_epi16(hi, 4), bits45));
    const __m512i s1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ls, 4), low4),
                                       _mm512_and_si512(_mm512_slli_epi16(hi, 2), bits45));
    __m512i tot[T];
    for (int t = 0; t < T; ++t) tot[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i sv = k < 2 ? s0 : s1;
      const __m512i sc_even = _mm512_slli_epi32(rows_of(sv, 2 * k), 4), sc_odd = rows_of(sv, 2 * k + 1);
      __m512i even[T], odd[T];
      for (int t = 0; t < T; ++t) even[t] = odd[t] = _mm512_setzero_si512();
      const uint8_t* codes = col + 256 + 512 * k;
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m512i x = load512(codes + 64 * v);
        const __m512i lo = _mm512_and_si512(x, low4), hi16 = _mm512_and_si512(x, high4);
        for (int t = 0; t < T; ++t) {
          const int8_t* q = a[t].qs + 256 * b + 64 * k + 4 * v;
          even[t] = dpbusd_bcast4(even[t], lo, q);
          odd[t] = dpbusd_bcast4(odd[t], hi16, q + 32);
        }
      }
      for (int t = 0; t < T; ++t) {
        tot[t] = _mm512_add_epi32(
            tot[t], _mm512_add_epi32(_mm512_mullo_epi32(even[t], sc_even), _mm512_mullo_epi32(odd[t], sc_odd)));
      }
    }
    // Mins as int16 pairs (m_2p, m_2p+1) per row, against the token's sub-block sums
    // (S_2p, S_2p+1) broadcast.
    const __m512i m0 = _mm512_or_si512(_mm512_and_si512(lm, low4), _mm512_and_si512(hi, bits45));
    const __m512i m1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lm, 4), low4),
                                       _mm512_and_si512(_mm512_srli_epi16(hi, 2), bits45));
    const __m512i mw[4] = {
        _mm512_cvtepu8_epi16(_mm512_castsi512_si256(m0)), _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(m0, 1)),
        _mm512_cvtepu8_epi16(_mm512_castsi512_si256(m1)), _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(m1, 1))};
    const __m512 dw = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col))),
                                    _mm512_set1_ps(1.0f / 16));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col + 32)));
    for (int t = 0; t < T; ++t) {
      // hadd of the 16-value sums: S_0..S_3 in the low 128 bits, S_4..S_7 in the high
      // ones, so the pairs are 32-bit words 0, 1, 4 and 5.
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bsums + 16 * b));
      const __m512i sums = _mm512_castsi256_si512(_mm256_hadd_epi16(bs, bs));
      __m512i msum = _mm512_setzero_si512();
      msum = _mm512_dpwssd_epi32(msum, mw[0], _mm512_permutexvar_epi32(_mm512_set1_epi32(0), sums));
      msum = _mm512_dpwssd_epi32(msum, mw[1], _mm512_permutexvar_epi32(_mm512_set1_epi32(1), sums));
      msum = _mm512_dpwssd_epi32(msum, mw[2], _mm512_permutexvar_epi32(_mm512_set1_epi32(4), sums));
      msum = _mm512_dpwssd_epi32(msum, mw[3], _mm512_permutexvar_epi32(_mm512_set1_epi32(5), sums));
      const __m512 da = _mm512_set1_ps(a[t].d[b]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[t]), _mm512_mul_ps(dw, da), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, da), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy, keep, acc[t]);
}

struct Q4_KR16 : R16Acts256 {
  static constexpr int kMaxTokens = 4;
  template <int T>
  static void tile(const uint8_t* g, int64_t nsb, const View* a, float* y, int64_t ldy, __mmask16 keep, bool first) {
    group_tile<T>(g, nsb, a, y, ldy, keep, first);
  }
};

}  // namespace

RowsFn avx512_rows_q4_K_r16() { return r16_rows<Q4_KR16>; }

}  // namespace moe::mm
