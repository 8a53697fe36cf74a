#pragma once
// q8_0 weights regrouped for the AVX-512 VNNI kernel: the internal type q8_0_r16.
//
// In q8_0 a row is an array of blocks (an f16 scale, 32 signed codes). q8_0_r16 takes the
// rows 16 at a time and, for each block column b, stores the 16 rows' block b together:
//   16 f16 scales (row 0..15)                                        32 bytes
//   8 chunks of 64 bytes; in chunk c, bytes 4j..4j+3 are row j's codes
//   4c..4c+3 of the block, each plus 128 (stored as unsigned)         512 bytes
// so one 64-byte load holds four codes of each of 16 rows, and one vpdpbusd against four
// activation codes broadcast to every lane advances all 16 rows' dot products: the lanes
// are the rows, with nothing to add across lanes at the end. The +128 makes the weights
// the unsigned operand vpdpbusd wants; each block's result is corrected by 128 times the
// sum of its activation codes (which the packed activations carry already).
//
// A group of 16 rows takes exactly the bytes of its 16 q8_0 rows (see kernels/regrouped.h
// for what regrouped matrices share).
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/regrouped.h"

namespace moe {

inline constexpr size_t kR16BlockBytes = 16 * sizeof(BlockQ8_0);  // one block column of a group

// Writes m regrouped to dst (m.rows * row_bytes bytes) and returns the q8_0_r16 matrix
// over dst.
QMatrix regroup_q8_0_r16(const QMatrix& m, uint8_t* dst);

// Group g (rows 16 g .. 16 g + 15) of a q8_0_r16 matrix back in q8_0 form: 16 rows of
// row_bytes(Q8_0, w.cols) each, one after another.
void ungroup_q8_0_r16(const QMatrix& w, int64_t group, BlockQ8_0* rows);

}  // namespace moe
