#pragma once
// The loops the regrouped layouts (kernels/regrouped.h) share: a group of 16 rows stores,
// for each block column, the 16 rows' blocks together in kR16Rows * sizeof(Block) bytes.
// Each layout supplies how one row's block goes into its column and back.
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "kernels/regrouped.h"

namespace moe {

// put(column, r, block): writes row r's block into the column (zeroed first). Returns the
// matrix over dst, of type `to`.
template <class Block, class Put>
QMatrix regroup_columns(const QMatrix& m, GgmlType from, GgmlType to, uint8_t* dst, Put&& put) {
  if (m.type != from || m.rows <= 0 || m.rows % kR16Rows != 0) {
    fail("regroup: a {} matrix of {} rows is not {} in groups of 16 rows", type_name(m.type), m.rows, type_name(from));
  }
  const int64_t nb = m.cols / traits(from).block_size;
  const size_t rb = row_bytes(from, m.cols), column = kR16Rows * sizeof(Block);
  for (int64_t g = 0; g < m.rows / kR16Rows; ++g) {
    uint8_t* group = dst + size_t(g) * kR16Rows * rb;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = group + size_t(b) * column;
      std::memset(out, 0, column);
      for (int r = 0; r < kR16Rows; ++r) put(out, r, reinterpret_cast<const Block*>(m.row(g * kR16Rows + r))[b]);
    }
  }
  return QMatrix{to, m.rows, m.cols, dst, rb};
}

// get(column, r, block): reads row r's block (zeroed first) back out of the column. Group g
// of w goes to `rows`, 16 rows of blocks one after another.
template <class Block, class Get>
void ungroup_columns(const QMatrix& w, GgmlType type, int64_t group, Block* rows, Get&& get) {
  if (w.type != type) fail("ungroup: the matrix is {}, not {}", type_name(w.type), type_name(type));
  const int64_t nb = w.cols / traits(type).block_size;
  const uint8_t* src = w.row(group * kR16Rows);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* in = src + size_t(b) * kR16Rows * sizeof(Block);
    for (int r = 0; r < kR16Rows; ++r) {
      Block& blk = rows[r * nb + b];
      std::memset(&blk, 0, sizeof(blk));
      get(in, r, blk);
    }
  }
}

}  // namespace moe
