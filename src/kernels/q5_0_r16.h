#pragma once
// q5_0 weights regrouped for the AVX-512 VNNI kernel: the internal type q5_0_r16. Q4_K_M
// files hold q5_0 where a q4_K row does not divide into 256 (DeepSeek's per-head W_kb, 128
// wide), and the row kernels spent three times the time per byte of the regrouped types
// there.
//
// q5_0 rows are arrays of 22-byte blocks (f16 d, 32 five-bit codes q; value = d * (q - 16)).
// q5_0_r16 takes the rows 16 at a time and, for each block column b, stores the 16 rows'
// block b together (352 bytes, the same as 16 q5_0 blocks):
//   [0, 32)     d of rows 0..15 (f16)
//   [32, 96)    the codes' fifth bits: byte 4r + j holds, for row r, that of code 4v + j
//               in bit v and that of code 16 + 4v + j in bit 4 + v (v = 0..3)
//   [96, 352)   the codes' low 4 bits: for v = 0..3, 64 bytes at 96 + 64 v whose byte
//               4r + j holds, for row r, those of code 4v + j in its low nibble and of
//               code 16 + 4v + j in its high one
// So a vector of low bits, masked and completed with one bit of the fifth-bit vector, holds
// four codes (0..31) of each of 16 rows: the unsigned operand vpdpbusd wants.
//
// See kernels/regrouped.h for what regrouped matrices share.
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/regrouped.h"

namespace moe {

inline constexpr size_t kQ5_0R16BlockBytes = 16 * sizeof(BlockQ5_0);  // one block column of a group

// Writes m (q5_0, rows a multiple of 16) regrouped to dst and returns the q5_0_r16 matrix.
QMatrix regroup_q5_0_r16(const QMatrix& m, uint8_t* dst);

// Group g of a q5_0_r16 matrix back in q5_0 form: 16 rows, one after another.
void ungroup_q5_0_r16(const QMatrix& w, int64_t group, BlockQ5_0* rows);

}  // namespace moe
