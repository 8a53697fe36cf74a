#pragma once
// Byte layouts of ggml's quantized blocks, exactly as GGUF files store them (little
// endian, no padding; a row is an array of blocks). The field order and the meaning of
// every bit follow ggml-common.h / ggml-quants.c; the tests build blocks byte by byte
// against these definitions.
#include <cstdint>

namespace moe {

inline constexpr int kQK0 = 32;   // elements per q4_0 / q4_1 / q5_0 / q5_1 / q8_0 block
inline constexpr int kQKK = 256;  // elements per k-quant super-block
inline constexpr int kQF8 = 128;  // elements per fp8_e4m3 block (DeepSeek's 128-wide scale blocks)

// x[i] = d * qs[i]
struct BlockQ8_0 {
  uint16_t d;     // f16 scale
  int8_t qs[32];  // elements 0..31
};

// x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8), j < 16
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};

// Like q4_0 with a fifth bit: bit j of qh (read as little-endian u32) is bit 4 of element
// j, for all 32 elements; values are (q - 16) * d.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};

// q4_0's nibble order with a min instead of the fixed offset:
// x[j] = d * (qs[j] & 15) + m, x[j + 16] = d * (qs[j] >> 4) + m, j < 16
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 min (the value of code 0)
  uint8_t qs[16];
};

// q5_0's bits with q4_1's min: code q = nibble | (bit j of qh) << 4, x = d * q + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};

// 8 sub-blocks of 32 with a 6-bit scale and a 6-bit min each:
// x = d * sc[j] * q - dmin * m[j]. The 64 scale/min bits live in 12 bytes:
//   bytes 0..3:  sc[0..3] in bits 0..5, bits 4..5 of sc[4..7] in bits 6..7
//   bytes 4..7:  m[0..3]  in bits 0..5, bits 4..5 of m[4..7]  in bits 6..7
//   bytes 8..11: bits 0..3 of sc[4..7] (low nibble) and of m[4..7] (high nibble)
// Nibbles: each 64 elements use 32 bytes, low nibbles are the first 32 elements (sub-block
// 2k), high nibbles the next 32 (sub-block 2k+1).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};

// q4_K plus a fifth bit: element 64k + l takes bit 2k of qh[l] (low nibble half) and
// element 64k + 32 + l takes bit 2k+1 of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};

// 16 groups of 16 with int8 scales: x = d * scales[i / 16] * (q - 32), q 6 bits. For each
// half n (128 elements) and l < 32, with L = ql + 64n, H = qh + 32n:
//   q[128n + l]      = (L[l] & 15)      | ((H[l] >> 0) & 3) << 4
//   q[128n + 32 + l] = (L[l + 32] & 15) | ((H[l] >> 2) & 3) << 4
//   q[128n + 64 + l] = (L[l] >> 4)      | ((H[l] >> 4) & 3) << 4
//   q[128n + 96 + l] = (L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};

// fp8_e4m3 (moengine's own type, not in GGUF): x[i] = d * e4m3(qs[i]). Only 4-byte
// aligned inside a row, and rows of a QMatrix may be less: read d with memcpy.
struct BlockF8E4M3 {
  float d;          // f32 scale (the checkpoint's scale_inv for this block)
  uint8_t qs[128];  // E4M3 codes, see core/fp8.h
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(alignof(BlockQ6_K) == 2);
static_assert(sizeof(BlockF8E4M3) == 132);

// Scale and min of sub-block j (0..7) from the 12 packed bytes of a q4_K / q5_K block.
inline void unpack_scale_min_k4(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = uint8_t((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Inverse of unpack_scale_min_k4 for 8 scales and 8 mins, each < 64.
inline void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

}  // namespace moe
