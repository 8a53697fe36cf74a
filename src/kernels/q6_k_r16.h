#pragma once
// q6_K weights regrouped for the AVX-512 VNNI kernel: the internal type q6_K_r16.
//
// q6_K rows are arrays of 210-byte super-blocks (256 6-bit codes q, 16 int8 scales, one
// per 16 values, and an f16 d; value i = d * sc[i / 16] * (q[i] - 32)). q6_K_r16 takes the
// rows 16 at a time and, for each super-block column b, stores the 16 rows' super-block b
// together (3360 bytes, the same as 16 q6_K super-blocks):
//   [0, 32)       d of rows 0..15 (f16)
//   [32, 288)     the scales in pairs: byte 32 i + 2 r + e is sc[2i + e] of row r
//   [288, 2336)   the codes' low 4 bits: for p = 0..3 and v = 0..7, 64 bytes at
//                 288 + 512 p + 64 v whose byte 4r + j holds, for row r, those of code
//                 64p + 4v + j in its low nibble and of code 64p + 32 + 4v + j in its high one
//   [2336, 3360)  the codes' high 2 bits: for p and w = 0..3, 64 bytes at 2336 + 256 p + 64 w
//                 whose byte 4r + j holds, for row r, those of codes 64p + 4w + j,
//                 64p + 32 + 4w + j, 64p + 16 + 4w + j and 64p + 48 + 4w + j (bits 0-1, 2-3,
//                 4-5, 6-7): one such vector completes two vectors of low bits.
// So a 64-byte vector of low bits, masked and completed with its high bits, holds four
// codes (0..63) of one 16-value sub-block for each of 16 rows: the unsigned operand
// vpdpbusd wants against four activation codes broadcast to every lane.
//
// See kernels/regrouped.h for what regrouped matrices share.
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/regrouped.h"

namespace moe {

inline constexpr size_t kQ6KR16BlockBytes = 16 * sizeof(BlockQ6_K);  // one super-block column of a group

// Writes m (q6_K, rows a multiple of 16) regrouped to dst and returns the q6_K_r16 matrix.
QMatrix regroup_q6_K_r16(const QMatrix& m, uint8_t* dst);

// Group g of a q6_K_r16 matrix back in q6_K form: 16 rows, one after another.
void ungroup_q6_K_r16(const QMatrix& w, int64_t group, BlockQ6_K* rows);

}  // namespace moe
