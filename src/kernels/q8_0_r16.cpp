#include "kernels/q8_0_r16.h"

#include <cstring>

#include "core/error.h"

namespace moe {

QMatrix regroup_q8_0_r16(const QMatrix& m, uint8_t* dst) {
  if (m.type != GgmlType::Q8_0 || m.rows <= 0 || m.rows % kR16Rows != 0)
    fail("regroup: a {} matrix of {} rows is not q8_0 in groups of 16 rows", type_name(m.type), m.rows);
  const int64_t nb = m.cols / 32;
  const size_t rb = row_bytes(GgmlType::Q8_0, m.cols);
  for (int64_t g = 0; g < m.rows / kR16Rows; ++g) {
    uint8_t* group = dst + size_t(g) * kR16Rows * rb;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = group + size_t(b) * kR16BlockBytes;
      for (int j = 0; j < kR16Rows; ++j) {
        const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(m.row(g * kR16Rows + j))[b];
        std::memcpy(out + 2 * j, &blk.d, 2);
        // Four codes at a time; flipping the sign bit adds 128 to a two's complement
        // byte.
        for (int c = 0; c < 8; ++c) {
          uint32_t four;
          std::memcpy(&four, blk.qs + 4 * c, 4);
          four ^= 0x80808080u;
          std::memcpy(out + 32 + 64 * c + 4 * j, &four, 4);
        }
      }
    }
  }
  return QMatrix{GgmlType::Q8_0_R16, m.rows, m.cols, dst, rb};
}

void ungroup_q8_0_r16(const QMatrix& w, int64_t group, BlockQ8_0* rows) {
  if (w.type != GgmlType::Q8_0_R16) fail("ungroup: the matrix is {}, not q8_0_r16", type_name(w.type));
  const int64_t nb = w.cols / 32;
  const uint8_t* src = w.row(group * kR16Rows);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* in = src + size_t(b) * kR16BlockBytes;
    for (int j = 0; j < kR16Rows; ++j) {
      BlockQ8_0& blk = rows[j * nb + b];
      std::memcpy(&blk.d, in + 2 * j, 2);
      for (int i = 0; i < 32; ++i) blk.qs[i] = int8_t(in[32 + 64 * (i / 4) + 4 * j + i % 4] - 128);
    }
  }
}

}  // namespace moe
