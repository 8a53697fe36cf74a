#include "kernels/q5_0_r16.h"

#include <cstring>

#include "kernels/regroup_columns.h"

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
  return regroup_columns<BlockQ5_0>(m, GgmlType::Q5_0, GgmlType::Q5_0_R16, dst,
                                    [](uint8_t* out, int r, const BlockQ5_0& blk) {
                                      std::memcpy(out + 2 * r, &blk.d, 2);
                                      for (int i = 0; i < 32; ++i) {
                                        const int q = plain_code(blk, i);
                                        const R16Bits to = r16_bits(i, r);
                                        out[to.low] |= uint8_t((q & 15) << to.low_shift);
                                        out[to.high] |= uint8_t((q >> 4) << to.high_bit);
                                      }
                                    });
}

void ungroup_q5_0_r16(const QMatrix& w, int64_t group, BlockQ5_0* rows) {
  ungroup_columns(w, GgmlType::Q5_0_R16, group, rows, [](const uint8_t* in, int r, BlockQ5_0& blk) {
    std::memcpy(&blk.d, in + 2 * r, 2);
    uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) {
      const R16Bits from = r16_bits(i, r);
      const int q = ((in[from.low] >> from.low_shift) & 15) | ((in[from.high] >> from.high_bit) & 1) << 4;
      blk.qs[i % 16] |= uint8_t((q & 15) << (i < 16 ? 0 : 4));
      qh |= uint32_t(q >> 4) << i;
    }
    std::memcpy(blk.qh, &qh, 4);
  });
}

}  // namespace moe
