#pragma once
// What the AVX-512 attention kernels (f32 and bf16) share: the 16x16 register transpose
// that turns lanes-as-rows results back into rows, and the horizontal sums of a block of
// row-by-key accumulators. Only for files compiled for AVX-512.
#include "kernels/attention_impl.h"
#include "kernels/matmul_avx512.h"
#include "kernels/ops_simd.h"

namespace moe::attn {

// The 16 lanes folded to 8 (low half plus high half).
MOE_AVX512_INLINE __m256 fold(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// v[i] becomes column i of the 16x16 matrix whose rows v held: four rounds of shuffles, no
// memory round trip.
MOE_AVX512_INLINE void transpose16(__m512 v[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  // v[4b + c], lane k: column 4k + c of rows 4b .. 4b + 3.
  for (int b = 0; b < 4; ++b) {
    v[4 * b] = _mm512_shuffle_ps(t[4 * b], t[4 * b + 2], 0x44);
    v[4 * b + 1] = _mm512_shuffle_ps(t[4 * b], t[4 * b + 2], 0xEE);
    v[4 * b + 2] = _mm512_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0x44);
    v[4 * b + 3] = _mm512_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0xEE);
  }
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < 4; ++c) {
      t[8 * h + c] = _mm512_shuffle_f32x4(v[8 * h + c], v[8 * h + 4 + c], 0x88);
      t[8 * h + 4 + c] = _mm512_shuffle_f32x4(v[8 * h + c], v[8 * h + 4 + c], 0xDD);
    }
  }
  for (int c = 0; c < 8; ++c) {
    v[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    v[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
  }
}

// s[r * kChunk + j] = scale * (the lanes of acc[r][j] summed), reduced 8 sums at a time;
// unused slots are zero and do not change the others.
template <int RB, int NP>
MOE_AVX512_INLINE void store_scores(const __m512 (&acc)[RB][NP], float scale, float* s) {
  constexpr int kPairs = RB * NP;
  for (int e0 = 0; e0 < kPairs; e0 += 8) {
    __m256 flat[8];
    for (int e = 0; e < 8; ++e) {
      const int i = e0 + e;
      flat[e] = i < kPairs ? fold(acc[i / NP][i % NP]) : _mm256_setzero_ps();
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(simd::hsum8(flat), _mm256_set1_ps(scale)));
    for (int e = 0; e < 8 && e0 + e < kPairs; ++e) s[((e0 + e) / NP) * kChunk + (e0 + e) % NP] = sums[e];
  }
}

}  // namespace moe::attn
