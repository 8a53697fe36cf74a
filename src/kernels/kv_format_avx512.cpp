// KV row decoders with AVX-512: 16 values per step, the tail with a masked step.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/kv_format.h"
#include "kernels/matmul_avx512.h"

namespace moe::kvfmt {
namespace {

MOE_AVX512_INLINE __mmask16 tail(int64_t n) { return __mmask16((1u << n) - 1); }

// As the AVX2 decoder: E4M3 code bits placed as f16 bits give 2^-8 of the value.
MOE_AVX512_INLINE __m512 fp8x16(__m128i codes) {
  const __m256i c = _mm256_cvtepu8_epi16(codes);
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x80)), 8),
                                    _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x7F)), 7));
  return _mm512_cvtph_ps(h);
}

MOE_AVX512 void f16(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  if (i < n) {
    const __mmask16 m = tail(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + i)));
  }
}

MOE_AVX512 void bf16(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  if (i < n) {
    const __mmask16 m = tail(n - i);
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in + i));
    _mm512_mask_storeu_ps(out + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
}

MOE_AVX512 void fp8(const uint8_t* in, int64_t n, float scale, float* out) {
  const __m512 s = _mm512_set1_ps(scale * 256.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_mul_ps(fp8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))), s));
  if (i < n) {
    const __mmask16 m = tail(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(fp8x16(_mm_maskz_loadu_epi8(m, in + i)), s));
  }
}

MOE_AVX512 void q8(const int8_t* in, int64_t n, float d, float* out) {
  const __m512 vd = _mm512_set1_ps(d);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(w), vd));
  }
  if (i < n) {
    const __mmask16 m = tail(n - i);
    const __m512i w = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, in + i));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_cvtepi32_ps(w), vd));
  }
}

}  // namespace

Decoders avx512_decoders() { return Decoders{f16, bf16, fp8, q8, "avx512"}; }

}  // namespace moe::kvfmt
