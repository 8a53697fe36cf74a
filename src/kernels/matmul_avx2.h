#pragma once
// Helpers shared by the AVX2 kernel files. Every function carries its own target
// attribute: the project is compiled for baseline x86-64, and a file-wide
// `#pragma GCC target` would also compile inline library code (std::vector, ...) for
// AVX2, which the linker could then hand to the baseline callers.
#include <immintrin.h>

#include <cstdint>

#include "kernels/matmul.h"

#define MOE_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MOE_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace moe::mm::avx2 {

MOE_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 int32 lanes whose sum is the dot product of 32 unsigned bytes u with 32 signed bytes s.
// maddubs adds adjacent u8*s8 products into int16 with saturation, so callers keep
// |u| * |s| * 2 below 32768 (u <= 128 with s in [-127, 127] is safe).
MOE_AVX2_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Same, with each int16 pair sum weighted by the int16 lanes of `scale` (k-quant scales).
MOE_AVX2_INLINE __m256i dot_u8s8_scaled(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}

MOE_AVX2_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// The 12 packed 6-bit scale/min bytes of a q4_K/q5_K block as 16 bytes: scales 0-7, then
// mins 0-7. Unpacked in vector registers (a scalar unpack costs twice the instructions
// plus the moves into vector registers). The 16-byte load reads 4 bytes past the 12 scale
// bytes, still inside the block.
MOE_AVX2_INLINE __m128i unpack_k4_scales_mins(const uint8_t* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));  // u32 lanes u0 u1 u2 -
  const __m128i low6 = _mm_and_si128(v, _mm_set1_epi8(63));                // sc0-3, m0-3
  const __m128i u2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
  const __m128i nib = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi8(15));
  const __m128i top = _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi8(0x30));
  const __m128i high = _mm_or_si128(nib, top);                              // sc4-7, m4-7
  return _mm_unpacklo_epi32(low6, high);
}

// Where the four vectors of fp8x32_to_ps start within its 32 codes.
inline constexpr int kFp8x32Order[4] = {0, 16, 8, 24};

// 32 E4M3 codes at p to 32 floats, each e4m3(code) * 2^-8 exactly (the NaN codes 0x7F/0xFF
// come out as +-480 * 2^-8): vector j holds codes kFp8x32Order[j] .. +7. The f16 bit
// pattern sign << 15 | (code & 0x7F) << 7 lines E4M3's exponent up with the low 4 bits of
// f16's and its mantissa with the top 3 of f16's, so vcvtph2ps decodes it; the biases (7
// and 15) differ by 8, for subnormals too. The pattern is the code in the high byte of a
// 16-bit lane shifted right by 1 (arithmetically, which also copies the sign into bit 14;
// the mask clears that bit); the in-lane unpacks leave the codes in the order above.
MOE_AVX2_INLINE void fp8x32_to_ps(const uint8_t* p, __m256 (&w)[4]) {
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i z = _mm256_setzero_si256(), keep = _mm256_set1_epi16(int16_t(0xBFFF));
  const __m256i lo = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpacklo_epi8(z, c), 1), keep);
  const __m256i hi = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpackhi_epi8(z, c), 1), keep);
  w[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(lo));
  w[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1));
  w[2] = _mm256_cvtph_ps(_mm256_castsi256_si128(hi));
  w[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1));
}

MOE_AVX2_INLINE __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Weight rows a GEMV tile prefetches: the next tile's rows when there is one, else its own
// (already cached, so those prefetches cost an instruction and nothing else).
template <int R>
struct PrefetchRows {
  const uint8_t* p[R];
  MOE_AVX2_INLINE PrefetchRows(const QMatrix& w, int64_t row, int64_t pf_row) {
    for (int r = 0; r < R; ++r) p[r] = w.row(pf_row >= 0 ? pf_row + r : row + r);
  }
  // Cache lines [offset, offset + 64 * kLines) of row r.
  template <int kLines>
  MOE_AVX2_INLINE void fetch(int r, int64_t offset) const {
    for (int k = 0; k < kLines; ++k) _mm_prefetch(reinterpret_cast<const char*>(p[r] + offset + 64 * k), _MM_HINT_T0);
  }
};

// Writes acc[r][t] (reduced) to y[(tok + t) * ldy + row + r].
template <int R, int T>
MOE_AVX2_INLINE void store_tile(const __m256 (&acc)[R][T], float* y, int64_t ldy, int64_t row, int64_t tok) {
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) y[(tok + t) * ldy + row + r] = hsum(acc[r][t]);
  }
}

}  // namespace moe::mm::avx2
