// KV row decoders with AVX2 + F16C: 8 values per step, the tail through the generic ones.
#include <immintrin.h>

#include "kernels/kv_format.h"

namespace moe::kvfmt {
namespace {

#define MOE_AVX2_F16C __attribute__((target("avx2,fma,f16c")))

// E4M3 codes as f16 bits: the code's 7 low bits shifted under the half's exponent
// field; the half is then 2^-8 of the value (E4M3's exponent bias is 8 below half's).
MOE_AVX2_F16C inline __m256 fp8x8(const uint8_t* in) {
  const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x80)), 8),
                                 _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x7F)), 7));
  return _mm256_cvtph_ps(h);
}

MOE_AVX2_F16C void f16(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  if (i < n) generic_decoders().f16(in + i, n - i, out + i);
}

MOE_AVX2_F16C void bf16(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  if (i < n) generic_decoders().bf16(in + i, n - i, out + i);
}

MOE_AVX2_F16C void fp8(const uint8_t* in, int64_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale * 256.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(fp8x8(in + i), s));
  if (i < n) generic_decoders().fp8(in + i, n - i, scale, out + i);
}

MOE_AVX2_F16C void q8(const int8_t* in, int64_t n, float d, float* out) {
  const __m256 vd = _mm256_set1_ps(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(w), vd));
  }
  if (i < n) generic_decoders().q8(in + i, n - i, d, out + i);
}

}  // namespace

Decoders avx2_decoders() { return Decoders{f16, bf16, fp8, q8, "avx2"}; }

}  // namespace moe::kvfmt
