// AVX-512 (F, BW, VL, VNNI) kernels for the k-quants (q4_K, q5_K, q6_K) against q8
// activations with one scale per 256 values: the AVX2 kernels' arithmetic
// (matmul_avx2_k.cpp) on 64 codes per instruction instead of 32.
//
// Inside a super-block everything is integer. Each 512-bit weight vector holds the codes
// of two consecutive sub-blocks in the order the token's codes lie in memory, so the
// token's side is one load; the weight side is built once per tile from the packed bits
// (a 256-bit load spread to both halves and shifted per half), shared by the tile's
// tokens. maddubs multiplies unsigned codes by the token's signed ones into int16 pairs,
// and vpdpwssd weights those by the sub-block scales (int16 lanes) and adds them to the
// int32 sum: two instructions per 64 products and token. The mins (q4_K/q5_K) and the -32
// offset (q6_K) come from the token's 16-value code sums, as on AVX2. Then one conversion
// and FMA per super-block and (row, token), and the lanes are added once at the end.
//
// A (row, token) pair is summed in the same order whatever the tile, so a token's result
// is bit-identical alone or in a batch.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>
#include <type_traits>

#include "kernels/matmul_avx2.h"
#include "kernels/matmul_avx512.h"
#include "kernels/matmul_impl.h"
#include "kernels/quant_blocks.h"

namespace moe::mm {
namespace {

MOE_AVX512_INLINE __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The 256-bit vector in both halves of a 512-bit one.
MOE_AVX512_INLINE __m512i both_halves(__m256i v) { return _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1); }

// int16 lanes: `lo` in the low half, `hi` in the high half (per-half shift counts and
// scale indices).
MOE_AVX512_INLINE __m512i halves16(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(int16_t(lo)), _mm256_set1_epi16(int16_t(hi)), 1);
}

// acc (int32) + the int16 pair sums of u8 codes x s8 activations, weighted by the int16
// scale lanes.
MOE_AVX512_INLINE __m512i dot_scaled(__m512i acc, __m512i u, __m512i a, __m512i scales) {
  return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, a), scales);
}

template <class B>
struct SuperBlockTiles512 {
  using Block = typename B::Block;
  static constexpr int kRows = 2, kTokens = 4;
  static constexpr int kLines1 = int(sizeof(Block)) / 64 + 1;

  template <int R, int T>
  MOE_AVX512 static void tile(const QMatrix& w, int64_t row, const PackedActs& x, int64_t tok, float* y,
                              int64_t ldy, int64_t pf_row) {
    const avx2::PrefetchRows<R> pf(w, row, pf_row);
    const Block* wr[R];
    Q8x256View a[T];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const Block*>(w.row(row + r));
    for (int t = 0; t < T; ++t) a[t] = q8x256_view(x, tok + t);
    __m512 acc[R][T];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    const int64_t nsb = w.cols / 256;
    for (int64_t b = 0; b < nsb; ++b) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if constexpr (T == 1) pf.template fetch<kLines1>(r, b * int64_t(sizeof(Block)));
        B::template superblock<T>(wr[r][b], a, b, acc[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[(tok + t) * ldy + row + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
  }
};

// q4_K (kHigh = false) and q5_K (kHigh = true). Chunk k of qs holds sub-block 2k in its low
// nibbles and 2k + 1 in its high ones: spread to both halves and shifted by 0 and 4 bits,
// it gives sub-blocks 2k and 2k + 1 in token order.
template <bool kHigh>
struct QKAsym512 {
  using Block = std::conditional_t<kHigh, BlockQ5_K, BlockQ4_K>;

  template <int T>
  MOE_AVX512_INLINE static void superblock(const Block& blk, const Q8x256View (&a)[T], int64_t b,
                                           __m512 (&acc)[T]) {
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m128i sm = avx2::unpack_k4_scales_mins(blk.scales);
    const __m512i scales = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(sm));  // int16: sc0-7, m0-7
    const __m128i m8 = _mm_srli_si128(sm, 8);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));     // m0 m0 m1 m1 ... m7 m7
    __m512i isum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    __m512i qh;
    if constexpr (kHigh) qh = both_halves(load256(blk.qh));
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m512i q = _mm512_and_si512(_mm512_srlv_epi16(both_halves(load256(blk.qs + 32 * k)), halves16(0, 4)), low4);
      if constexpr (kHigh) {
        // Bit 2k of qh[l] is bit 4 of code l of sub-block 2k, bit 2k + 1 that of 2k + 1.
        const __m512i bit = _mm512_srlv_epi16(qh, halves16(2 * k, 2 * k + 1));
        q = _mm512_or_si512(q, _mm512_and_si512(_mm512_slli_epi16(bit, 4), _mm512_set1_epi8(16)));
      }
      const __m512i s = _mm512_permutexvar_epi16(halves16(2 * k, 2 * k + 1), scales);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) isum[t] = dot_scaled(isum[t], q, load512(a[t].qs + 256 * b + 64 * k), s);
    }
    uint32_t dm;  // d and dmin, converted together
    std::memcpy(&dm, &blk.d, 4);
    const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dm)));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i m = _mm256_madd_epi16(load256(a[t].bsums + 16 * b), mins);
      const __m128 s = _mm_mul_ps(d_dmin, _mm_set1_ps(a[t].d[b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_broadcastss_ps(s), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(m)),
                                _mm512_broadcastss_ps(_mm_movehdup_ps(s)), acc[t]);
    }
  }
};

// q6_K: half n of the block is 64 bytes of low bits (values 128n + 0..63 in the low
// nibbles, 128n + 64..127 in the high ones) and 32 bytes of high bits (two per value).
// Values 128n + 0..63 are the low nibbles with qh shifted left by 4 (first 32) and 2 (next
// 32); values 128n + 64..127 the high nibbles with qh as is and shifted right by 2. A
// sub-block is 16 values, so a vector's four sub-blocks take four scales, 8 int16 lanes
// each.
struct Q6K512 {
  using Block = BlockQ6_K;

  // int16 lane i takes scale 8n + 4m + i / 8.
  MOE_AVX512_INLINE static __m512i scale_index(int n, int m) {
    alignas(64) static constexpr int16_t kSubBlockOfLane[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    return _mm512_add_epi16(load512(kSubBlockOfLane), _mm512_set1_epi16(int16_t(8 * n + 4 * m)));
  }

  template <int T>
  MOE_AVX512_INLINE static void superblock(const Block& blk, const Q8x256View (&a)[T], int64_t b,
                                           __m512 (&acc)[T]) {
    const __m512i low4 = _mm512_set1_epi8(15), bits45 = _mm512_set1_epi8(0x30);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const __m512i scales = _mm512_zextsi256_si512(sc16);
    __m512i isum[T];
    // Codes are stored +32: subtract 32 * sum_g scale_g * bsum_g up front.
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(a[t].bsums + 16 * b)), 5);
      isum[t] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
    }
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      const __m512i ql = load512(blk.ql + 64 * n);
      const __m512i qh = both_halves(load256(blk.qh + 32 * n));
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                          _mm512_and_si512(_mm512_sllv_epi16(qh, halves16(4, 2)), bits45));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                          _mm512_and_si512(_mm512_srlv_epi16(qh, halves16(0, 2)), bits45));
      const __m512i s01 = _mm512_permutexvar_epi16(scale_index(n, 0), scales);
      const __m512i s23 = _mm512_permutexvar_epi16(scale_index(n, 1), scales);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* aq = a[t].qs + 256 * b + 128 * n;
        isum[t] = dot_scaled(dot_scaled(isum[t], q01, load512(aq), s01), q23, load512(aq + 64), s23);
      }
    }
    const float d = avx2::half_to_float(blk.d);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_set1_ps(d * a[t].d[b]), acc[t]);
    }
  }
};

}  // namespace

RowsFn avx512_rows_kquant(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K: return run_tiles<SuperBlockTiles512<QKAsym512<false>>>;
    case GgmlType::Q5_K: return run_tiles<SuperBlockTiles512<QKAsym512<true>>>;
    case GgmlType::Q6_K: return run_tiles<SuperBlockTiles512<Q6K512>>;
    default: return nullptr;
  }
}

}  // namespace moe::mm
