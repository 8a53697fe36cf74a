#include "kernels/q5_0_r16.h"

#include <cstring>

#include "core/error.h"

namespace moe {
namespace {

constexpr size_t kHigh = 32, kLow = 96;

int plain_code(const BlockQ5_0& blk, int i) {
  uint32_t qh;
  std::memcpy(&qh, blk.qh, 4);
  const int low = i < 16 ? blk.qs[i] & 15 : blk.qs[i - 16] >> 4;
  return low | int((qh >> i) & 1) << 4;
}

// Code i (0..31) of row r in a column: its byte of low bits and nibble, its byte and bit of
// the fifth bits.
struct R16Bits {
  size_t low;
  int low_shift;
  size_t high;
  int high_bit;
};

R16Bits r16_bits(int i, int r) {
  const int upper = i / 16, v = (i % 16) / 4, j = i % 4;
  return {kLow + size_t(64 * v + 4 * r + j), 4 * upper, kHigh + size_t(4 * r + j), v + 4 * upper};
}

}  // namespace

QMatrix regroup_q5_0_r16(const QMatrix& m, uint8_t* dst) {
  if (m.type != GgmlType::Q5_0 || m.rows <= 0 || m.rows % kR16Rows != 0) {
    fail("regroup: a {} matrix of {} rows is not q5_0 in groups of 16 rows", type_name(m.type), m.rows);
  }
  const int64_t nb = m.cols / 32;
  const size_t rb = row_bytes(GgmlType::Q5_0, m.cols);
  for (int64_t g = 0; g < m.rows / kR16Rows; ++g) {
    uint8_t* group = dst + size_t(g) * kR16Rows * rb;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = group + size_t(b) * kQ5_0R16BlockBytes;
      std::memset(out, 0, kQ5_0R16BlockBytes);
      for (int r = 0; r < kR16Rows; ++r) {
        const BlockQ5_0& blk = reinterpret_cast<const BlockQ5_0*>(m.row(g * kR16Rows + r))[b];
        std::memcpy(out + 2 * r, &blk.d, 2);
        for (int i = 0; i < 32; ++i) {
          const int q = plain_code(blk, i);
          const R16Bits to = r16_bits(i, r);
          out[to.low] |= uint8_t((q & 15) << to.low_shift);
          out[to.high] |= uint8_t((q >> 4) << to.high_bit);
        }
      }
    }
  }
  return QMatrix{GgmlType::Q5_0_R16, m.rows, m.cols, dst, rb};
}

void ungroup_q5_0_r16(const QMatrix& w, int64_t group, BlockQ5_0* rows) {
  if (w.type != GgmlType::Q5_0_R16) fail("ungroup: the matrix is {}, not q5_0_r16", type_name(w.type));
  const int64_t nb = w.cols / 32;
  const uint8_t* src = w.row(group * kR16Rows);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* in = src + size_t(b) * kQ5_0R16BlockBytes;
    for (int r = 0; r < kR16Rows; ++r) {
      BlockQ5_0& blk = rows[r * nb + b];
      std::memset(&blk, 0, sizeof(blk));
      std::memcpy(&blk.d, in + 2 * r, 2);
      uint32_t qh = 0;
      for (int i = 0; i < 32; ++i) {
        const R16Bits from = r16_bits(i, r);
        const int q = ((in[from.low] >> from.low_shift) & 15) | ((in[from.high] >> from.high_bit) & 1) << 4;
        blk.qs[i % 16] |= uint8_t((q & 15) << (i < 16 ? 0 : 4));
        qh |= uint32_t(q >> 4) << i;
      }
      std::memcpy(blk.qh, &qh, 4);
    }
  }
}

}  // namespace moe
