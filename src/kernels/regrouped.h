#pragma once
// Weight layouts regrouped 16 rows at a time at load for the AVX-512 VNNI kernels, in
// which each vpdpbusd advances 16 rows' dot products (the lanes are the rows): q8_0
// becomes q8_0_r16 (kernels/q8_0_r16.h), q4_K q4_K_r16 (kernels/q4_k_r16.h), q6_K q6_K_r16
// (kernels/q6_k_r16.h) and q5_0 q5_0_r16 (kernels/q5_0_r16.h). A regrouped matrix has the size, row_stride and expert
// slice offsets of the one it came from; group g (rows 16 g .. 16 g + 15) starts at
// row(16 g), and QMatrix::row(r) of any other r means nothing. dequantize_row refuses
// these types: ungroup first.
#include <cstdint>

#include "kernels/matmul.h"

namespace moe {

inline constexpr int64_t kR16Rows = 16;

// Whether loading regroups weights on this machine: the AVX-512 matmul path is chosen
// (the others would ungroup at every call) and MOENGINE_REGROUP is not 0.
bool regroup_here();

// Whether m can be regrouped: a type with a regrouped form, in whole groups of 16 rows.
bool can_regroup(const QMatrix& m);

// Writes m regrouped to dst (m.rows * m.row_stride bytes) and returns the matrix over
// dst.
QMatrix regroup(const QMatrix& m, uint8_t* dst);

// Writes m to dst (m.rows * m.row_stride bytes), regrouped when `regroup` (m must then be
// regroupable), else byte for byte; returns the matrix over dst.
QMatrix copy_weights(const QMatrix& m, uint8_t* dst, bool regroup);

// Group g of a regrouped matrix back in its plain form: 16 rows of
// row_bytes(plain_type(w.type), w.cols) bytes each, one after another.
void ungroup(const QMatrix& w, int64_t group, void* rows);

// Asks the kernel to reclaim the pages of a matrix that was regrouped elsewhere (whole
// pages inside it only). Advice that keeps the contents: clean file pages are dropped and
// read again if anything touches them (the token embedding, when the output head was tied
// to it), and anonymous memory (a model assembled in memory) would go to swap, not be
// lost.
void release_weight_pages(const QMatrix& m);

}  // namespace moe
