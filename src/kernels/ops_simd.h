#pragma once
// AVX2/FMA helpers private to the transformer-op and attention kernels. Every function
// carries the target attribute itself because the project compiles for baseline x86-64;
// only code that is itself compiled for AVX2 may call them (after checking cpu_features()).
#include <immintrin.h>

#define MOE_AVX2 __attribute__((target("avx2,fma")))

namespace moe::simd {

MOE_AVX2 inline float hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

MOE_AVX2 inline float hmax(__m256 v) {
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
}

// [sum(v[0]), ..., sum(v[7])] in one reduction tree. Every lane is summed in the same
// order whatever the other lanes hold, so callers may pad with zeros freely.
MOE_AVX2 inline __m256 hsum8(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // v0..v3: low-half sums | high-half sums
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// e^x to about 1 ulp over the whole float range (Cephes' expf polynomial on
// r = x - n ln2, |r| <= ln2/2). 2^n is applied as two factors so that results down in the
// subnormal range and up to FLT_MAX come out right without special cases; above
// ln(FLT_MAX) it returns +inf and NaN stays NaN (the min/max operand order keeps it).
MOE_AVX2 inline __m256 exp(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.72283935546875f);
  const __m256 lo = _mm256_set1_ps(-104.0f);
  const __m256 overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  __m256 t = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  t = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), t);
  t = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), t);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(t, t), _mm256_add_ps(t, _mm256_set1_ps(1.0f)));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 r = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_blendv_ps(r, _mm256_set1_ps(__builtin_inff()), overflow);
}

// Lanes [0, n) set, for masked loads and stores of a ragged tail (0 <= n <= 8).
MOE_AVX2 inline __m256i tail_mask(int n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

}  // namespace moe::simd
