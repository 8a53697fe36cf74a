#pragma once
// FP8 E4M3 ("e4m3fn", as DeepSeek-V3/R1 checkpoints store weights): 1 sign bit, 4 exponent
// bits with bias 7, 3 mantissa bits. There are no infinities: codes 0x7F and 0xFF are NaN,
// 0x7E (448) is the largest finite value and subnormals are m/8 * 2^-6.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace moe {

inline constexpr float kFp8E4m3Max = 448.0f;

// Exact; -0.0 for 0x80, a quiet NaN (with the code's sign) for 0x7F and 0xFF.
constexpr float fp8_e4m3_to_f32(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80) << 24;
  const uint32_t exp = (c >> 3) & 15, mant = c & 7;
  if ((c & 0x7F) == 0x7F) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exp == 0) {
    // Subnormal: m * 2^-9 is exact in f32 (and a normal f32), only the sign is added.
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(mant) * 0x1p-9f));
  }
  // Normal: rebias the exponent (7 -> 127) and widen the mantissa (3 -> 23 bits).
  return std::bit_cast<float>(sign | ((exp + 120) << 23) | (mant << 20));
}

// All 256 codes decoded, for table lookups in plain C++ loops.
inline constexpr std::array<float, 256> kFp8E4m3ToF32 = [] {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[std::size_t(c)] = fp8_e4m3_to_f32(uint8_t(c));
  return t;
}();

// Round to nearest, ties to even. Values beyond 448 in magnitude, infinities included,
// saturate to +-448 (E4M3 has no infinity; the DeepSeek quantizer clamps the same way);
// NaN becomes 0x7F. Values below half the smallest subnormal (2^-10) become +-0.
constexpr uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((x >> 24) & 0x80);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7F;
  if (std::bit_cast<float>(abs) >= kFp8E4m3Max) return uint8_t(sign | 0x7E);
  const int exp = int(abs >> 23) - 127;
  if (exp < -10) return sign;  // below 2^-10: rounds to zero (2^-10 itself is a tie to 0)
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;  // 24 significant bits
  // Keep 4 significant bits for a normal result, fewer for a subnormal one (whose unit is
  // 2^-9); a carry out of the kept bits moves to the next exponent by itself.
  const int drop = exp >= -6 ? 20 : 20 + (-6 - exp);
  uint32_t kept = mant >> drop;
  const uint32_t rest = mant & ((1u << drop) - 1), half = 1u << (drop - 1);
  if (rest > half || (rest == half && (kept & 1))) ++kept;
  if (exp < -6) return uint8_t(sign | kept);  // subnormal (kept = 8 is the smallest normal)
  // kept holds the implicit bit (8..16): code = (exp + 7) << 3 plus the mantissa bits.
  return uint8_t(sign | ((uint32_t(exp + 7) << 3) + kept - 8));
}

}  // namespace moe
