// AVX-512 (F, BW, VL, VNNI) kernel for q8_0 weights against q8 activations, and the path's
// table of kernels (the k-quants' are in matmul_avx512_k.cpp, q8_0_r16's in
// matmul_avx512_r16.cpp, q4_K_r16's in matmul_avx512_q4k_r16.cpp, bf16's in
// matmul_avx512_bf16.cpp where the CPU has AVX512_BF16; the other types run their AVX2
// kernels on this path).
//
// Two blocks fill a 512-bit register: 64 weight codes against 64 activation codes. q8_0
// codes are signed and vpdpbusd multiplies unsigned by signed bytes, so the weights go in
// as |w| (computed once per row and shared by the tile's tokens) and each token's codes
// are negated where w < 0 (one masked subtract). vpdpbusd sums four products per int32
// lane, so lanes 0..7 hold block b's sum in eight parts and lanes 8..15 block b+1's; they
// are converted to float and accumulated with the two blocks' scale products (d_w * d_a
// spread over the lanes: the weight scales by one word permute of the pair's first 64
// bytes, the token's by one permute of its 16 scales loaded at a time). The lanes are added
// up once per (row, token), at the end.
//
// A (row, token) pair is summed in the same order whatever the tile, so a token's result
// is bit-identical alone or in a batch (see matmul_avx2.cpp).
// GCC 12's AVX-512 headers build "undefined" vectors from themselves (GCC bug 105593,
// fixed in 13), which -Wuninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "core/cpu_features.h"
#include "kernels/matmul_avx2.h"
#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/quant_blocks.h"

namespace moe::mm {
namespace {

// The scales of blocks blk[0] and blk[1] as floats, in lanes 0..7 and 8..15: both lie in
// the pair's first 64 bytes (at bytes 0 and 34, 16-bit words 0 and 17), so one load and one
// word permute place them (a gather of 16 scales measured slower: it was a third of a
// cached GEMV's time).
MOE_AVX512_INLINE __m512 pair_scales(const BlockQ8_0* blk) {
  constexpr int w1 = int(sizeof(BlockQ8_0)) / 2;
  static_assert(sizeof(BlockQ8_0) % 2 == 0 && 2 * sizeof(BlockQ8_0) >= 64);
  const __m256i lanes = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, w1, w1, w1, w1, w1, w1, w1, w1);
  const __m512i idx = _mm512_zextsi256_si512(lanes);
  const __m512i words = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(blk));
  return _mm512_cvtph_ps(_mm512_castsi512_si256(words));
}

// Lanes 0..7 take element 2k of a 16-float vector, lanes 8..15 element 2k + 1.
MOE_AVX512_INLINE __m512i pair_index(int k) {
  return _mm512_inserti64x4(_mm512_set1_epi32(2 * k), _mm256_set1_epi32(2 * k + 1), 1);
}

MOE_AVX512_INLINE __m512 pair_of(float lo, float hi) {
  // (insertf32x8 would need AVX-512 DQ.)
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(lo)), _mm256_castps_pd(_mm256_set1_ps(hi)), 1));
}

MOE_AVX512_INLINE __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Codes of blk[0] in the low half and blk[1] in the high half.
MOE_AVX512_INLINE __m512i codes_pair(const BlockQ8_0* blk) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(blk[0].qs)), load256(blk[1].qs), 1);
}

// One row's side of a block pair: |codes| and where the codes are negative.
struct RowPair {
  __m512i u;
  __mmask64 neg;
};

MOE_AVX512_INLINE RowPair row_pair(__m512i codes) { return {_mm512_abs_epi8(codes), _mm512_movepi8_mask(codes)}; }

// acc + (sum of the products of the pair, per lane) * s.
MOE_AVX512_INLINE __m512 pair_dot(__m512 acc, const RowPair& w, __m512i a, __m512 s) {
  const __m512i signed_a = _mm512_mask_sub_epi8(a, w.neg, _mm512_setzero_si512(), a);
  const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u, signed_a);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc);
}

struct Q8_0Kernel512 {
  static constexpr int kRows = 4, kTokens = 4;

  template <int R, int T>
  MOE_AVX512 static void tile(const QMatrix& w, int64_t row, const PackedActs& x, int64_t tok, float* y,
                              int64_t ldy, int64_t pf_row) {
    const avx2::PrefetchRows<R> pf(w, row, pf_row);
    const BlockQ8_0* wr[R];
    Q8x32View a[T];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const BlockQ8_0*>(w.row(row + r));
    for (int t = 0; t < T; ++t) a[t] = q8x32_view(x, tok + t);
    // Even and odd pairs go to separate accumulators: one chain of FMAs per (row, token)
    // would wait on the FMA latency at every pair when the tile is small (decode).
    __m512 acc[R][T][2];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t][0] = acc[r][t][1] = _mm512_setzero_ps();
    }
    const int64_t nb = w.cols / 32, nb16 = nb / 16 * 16;
    int64_t b = 0;
    for (; b < nb16; b += 16) {
      __m512 da16[T];
      if constexpr (T == 1) {
        for (int r = 0; r < R; ++r) pf.template fetch<9>(r, b * int64_t(sizeof(BlockQ8_0)));
      }
      for (int t = 0; t < T; ++t) da16[t] = _mm512_loadu_ps(a[t].d + b);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i idx = pair_index(k);
        __m512i av[T];
        __m512 da[T];
        for (int t = 0; t < T; ++t) {
          av[t] = _mm512_loadu_si512(a[t].qs + 32 * (b + 2 * k));
          da[t] = _mm512_permutexvar_ps(idx, da16[t]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const RowPair wp = row_pair(codes_pair(wr[r] + b + 2 * k));
          const __m512 dw = pair_scales(wr[r] + b + 2 * k);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            acc[r][t][k & 1] = pair_dot(acc[r][t][k & 1], wp, av[t], _mm512_mul_ps(dw, da[t]));
          }
        }
      }
    }
    // Blocks left over after the groups of 16: pairs, then a lone block with zeros above.
    for (; b < nb; b += 2) {
      const bool lone = b + 1 == nb;
      const int k = int(b / 2) & 1;
      __m512i av[T];
      __m512 da[T];
      for (int t = 0; t < T; ++t) {
        av[t] = lone ? _mm512_zextsi256_si512(load256(a[t].qs + 32 * b)) : _mm512_loadu_si512(a[t].qs + 32 * b);
        da[t] = pair_of(a[t].d[b], lone ? 0.0f : a[t].d[b + 1]);
      }
      for (int r = 0; r < R; ++r) {
        const BlockQ8_0* blk = wr[r] + b;
        const RowPair wp = row_pair(lone ? _mm512_zextsi256_si512(load256(blk[0].qs)) : codes_pair(blk));
        const __m512 dw = pair_of(avx2::half_to_float(blk[0].d), lone ? 0.0f : avx2::half_to_float(blk[1].d));
        for (int t = 0; t < T; ++t) acc[r][t][k] = pair_dot(acc[r][t][k], wp, av[t], _mm512_mul_ps(dw, da[t]));
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        y[(tok + t) * ldy + row + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][t][0], acc[r][t][1]));
      }
    }
  }
};

}  // namespace

RowsFn avx512_rows(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return run_tiles<Q8_0Kernel512>;
    case GgmlType::BF16: return cpu_features().avx512bf16 ? avx512_rows_bf16() : nullptr;
    default: return avx512_rows_kquant(t);
  }
}

}  // namespace moe::mm
