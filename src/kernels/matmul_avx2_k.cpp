// AVX2 kernels for the k-quants (q4_K, q5_K, q6_K) against q8 activations with one scale
// per 256 values. Inside a super-block everything is integer: unsigned codes times
// activation codes (maddubs), weighted by the sub-block scales (madd), summed in int32;
// the mins (q4_K/q5_K) and the -32 offset (q6_K) come from the activations' 16-value code
// sums. Only then one conversion and FMA per super-block and (row, token).
#include <cstring>

#include "kernels/matmul_avx2.h"
#include "kernels/matmul_impl.h"
#include "kernels/quant_blocks.h"

namespace moe::mm {
namespace {

using namespace avx2;

// The int16 lane pattern that broadcasts int16 element j of a 128-bit lane to all 8 lanes.
MOE_AVX2_INLINE __m256i pick16(int j) { return _mm256_set1_epi16(int16_t(0x0100 + 0x0202 * j)); }

// Scales and mins of a q4_K/q5_K block: 8 x int16 scales broadcast to both 128-bit lanes,
// and the mins repeated per 16 values (m0 m0 m1 m1 ... m7 m7) to pair with the bsums.
struct ScalesMins {
  __m256i scales;
  __m256i mins;
};

MOE_AVX2_INLINE ScalesMins unpack_scales_k4(const uint8_t* s) {
  const __m128i all = unpack_k4_scales_mins(s);
  const __m128i m8 = _mm_srli_si128(all, 8);
  return {_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(all)), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8))};
}

// Tiles over super-blocks. B supplies the Block type and
// `template <int T> superblock(blk, a, b, acc)`: one row's super-block b for every token.
template <class B>
struct SuperBlockTiles {
  using Block = typename B::Block;
  static constexpr int kRows = 2, kTokens = 4;
  // Every token's result is summed over super-blocks in the same order whatever the tile
  // (decode or prefill), so a token's logits do not depend on the batch it is in.
  // Cache lines one super-block can touch.
  static constexpr int kLines1 = int(sizeof(Block)) / 64 + 1;

  template <int R, int T>
  MOE_AVX2 static void tile(const QMatrix& w, int64_t row, const PackedActs& x, int64_t tok, float* y,
                            int64_t ldy, int64_t pf_row) {
    const PrefetchRows<R> pf(w, row, pf_row);
    const Block* wr[R];
    Q8x256View a[T];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const Block*>(w.row(row + r));
    for (int t = 0; t < T; ++t) a[t] = q8x256_view(x, tok + t);
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    const int64_t nsb = w.cols / 256;
    for (int64_t b = 0; b < nsb; ++b) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if constexpr (T == 1) pf.template fetch<kLines1>(r, b * int64_t(sizeof(Block)));
        B::template superblock<T>(wr[r][b], a, b, acc[r]);
      }
    }
    store_tile(acc, y, ldy, row, tok);
  }
};

// q4_K (kHigh = false) and q5_K (kHigh = true).
template <bool kHigh>
struct QKAsym {
  using Block = std::conditional_t<kHigh, BlockQ5_K, BlockQ4_K>;

  template <int T>
  MOE_AVX2_INLINE static void superblock(const Block& blk, const Q8x256View (&a)[T], int64_t b, __m256 (&acc)[T]) {
    const __m256i low4 = _mm256_set1_epi8(15);
    const ScalesMins sm = unpack_scales_k4(blk.scales);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    __m256i qh;
    if constexpr (kHigh) qh = load(blk.qh);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i q = load(blk.qs + 32 * k);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kHigh) {
        // Bit 2k of qh[l] is bit 4 of the low-nibble code l, bit 2k+1 of the high one.
        const __m256i b16 = _mm256_set1_epi8(16);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k), 4), b16));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k + 1), 4), b16));
      }
      const __m256i s_lo = _mm256_shuffle_epi8(sm.scales, pick16(2 * k));
      const __m256i s_hi = _mm256_shuffle_epi8(sm.scales, pick16(2 * k + 1));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* aq = a[t].qs + 256 * b + 64 * k;
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(dot_u8s8_scaled(lo, load(aq), s_lo),
                                                              dot_u8s8_scaled(hi, load(aq + 32), s_hi)));
      }
    }
    uint32_t dm;  // d and dmin, converted together
    std::memcpy(&dm, &blk.d, 4);
    const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dm)));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i mins = _mm256_madd_epi16(load(a[t].bsums + 16 * b), sm.mins);
      const __m128 s = _mm_mul_ps(d_dmin, _mm_set1_ps(a[t].d[b]));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_broadcastss_ps(s), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_broadcastss_ps(_mm_movehdup_ps(s)), acc[t]);
    }
  }
};

// The int16 lanes that broadcast scale 2c of a 128-bit lane's eight to the low lane and
// scale 2c + 1 to the high lane.
MOE_AVX2_INLINE __m256i pick_pair16(int c) {
  const int16_t lo = int16_t(0x0100 + 0x0202 * (2 * c)), hi = int16_t(0x0100 + 0x0202 * (2 * c + 1));
  return _mm256_setr_epi16(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi);
}

struct Q6K {
  using Block = BlockQ6_K;

  template <int T>
  MOE_AVX2_INLINE static void superblock(const Block& blk, const Q8x256View (&a)[T], int64_t b, __m256 (&acc)[T]) {
    const __m256i low4 = _mm256_set1_epi8(15), bits45 = _mm256_set1_epi8(0x30);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    __m256i isum[T];
    // Codes are stored +32: subtract 32 * sum_g scale_g * bsum_g up front.
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_slli_epi32(_mm256_madd_epi16(sc16, load(a[t].bsums + 16 * b)), 5));
    }
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      const __m256i ql0 = load(blk.ql + 64 * n), ql1 = load(blk.ql + 64 * n + 32);
      const __m256i qh = load(blk.qh + 32 * n);
      // Scales of this half in both 128-bit lanes; chunk c (32 values) needs scale
      // 8n + 2c in the low lane and 8n + 2c + 1 in the high lane.
      const __m256i sc = n == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                : _mm256_permute2x128_si256(sc16, sc16, 0x11);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
      };
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i s = _mm256_shuffle_epi8(sc, pick_pair16(c));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* aq = a[t].qs + 256 * b + 128 * n + 32 * c;
          isum[t] = _mm256_add_epi32(isum[t], dot_u8s8_scaled(q[c], load(aq), s));
        }
      }
    }
    const float d = half_to_float(blk.d);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * a[t].d[b]), acc[t]);
    }
  }
};

template <class K>
void rows(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  run_tiles<K>(w, x, y, ldy, r0, r1);
}

}  // namespace

RowsFn avx2_rows_kquant(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K: return rows<SuperBlockTiles<QKAsym<false>>>;
    case GgmlType::Q5_K: return rows<SuperBlockTiles<QKAsym<true>>>;
    case GgmlType::Q6_K: return rows<SuperBlockTiles<Q6K>>;
    default: return nullptr;
  }
}

}  // namespace moe::mm
