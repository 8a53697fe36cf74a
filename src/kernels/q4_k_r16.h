#pragma once
// q4_K weights regrouped for the AVX-512 VNNI kernel: the internal type q4_K_r16.
//
// q4_K rows are arrays of 144-byte super-blocks (256 values: f16 d and dmin, eight 6-bit
// scales and mins packed in 12 bytes, 256 4-bit codes). q4_K_r16 takes the rows 16 at a
// time and, for each super-block column b, stores the 16 rows' super-block b together
// (2304 bytes, the same as 16 q4_K super-blocks):
//   [0, 32)      d of rows 0..15 (f16)
//   [32, 64)     dmin of rows 0..15 (f16)
//   [64, 256)    the scales sc_j and mins m_j, 6 bits each, in 4-bit and 2-bit planes
//                (q4_k_r16.cpp) that unpack to byte vectors with a few instructions
//   [256, 2304)  the codes: for sub-block pair k (0..3) and v (0..7), 64 bytes at
//                256 + 512 k + 64 v whose bytes 4r..4r+3 are row r's q4_K code bytes
//                qs[32 k + 4 v .. 32 k + 4 v + 3]: low nibbles are codes 4v..4v+3 of
//                sub-block 2k, high nibbles the same codes of sub-block 2k + 1.
// So a 64-byte load masked with 0x0f holds four codes of one sub-block for each of 16
// rows, the unsigned operand vpdpbusd wants against four activation codes broadcast to
// every lane: the lanes are the rows, with nothing to add across lanes at the end. Masked
// with 0xf0 it holds the next sub-block's codes times 16, which the kernel folds into
// that sub-block's scale.
//
// A matrix keeps its size, row_stride and the offsets of its expert slices; group g
// starts at row(16 g), and QMatrix::row(r) of any other r means nothing for this type.
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/regrouped.h"

namespace moe {

inline constexpr size_t kQ4KR16BlockBytes = 16 * sizeof(BlockQ4_K);  // one super-block column of a group

// Writes m (q4_K, rows a multiple of 16) regrouped to dst and returns the q4_K_r16
// matrix.
QMatrix regroup_q4_K_r16(const QMatrix& m, uint8_t* dst);

// Group g of a q4_K_r16 matrix back in q4_K form: 16 rows, one after another.
void ungroup_q4_K_r16(const QMatrix& w, int64_t group, BlockQ4_K* rows);

}  // namespace moe
