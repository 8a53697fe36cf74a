#include "kernels/q8_0_r16.h"

#include <cstring>

#include "kernels/regroup_columns.h"

namespace moe {

QMatrix regroup_q8_0_r16(const QMatrix& m, uint8_t* dst) {
  return regroup_columns<BlockQ8_0>(m, GgmlType::Q8_0, GgmlType::Q8_0_R16, dst,
                                    [](uint8_t* out, int r, const BlockQ8_0& blk) {
                                      std::memcpy(out + 2 * r, &blk.d, 2);
                                      // Four codes at a time; flipping the sign bit adds 128
                                      // to a two's complement byte.
                                      for (int c = 0; c < 8; ++c) {
                                        uint32_t four;
                                        std::memcpy(&four, blk.qs + 4 * c, 4);
                                        four ^= 0x80808080u;
                                        std::memcpy(out + 32 + 64 * c + 4 * r, &four, 4);
                                      }
                                    });
}

void ungroup_q8_0_r16(const QMatrix& w, int64_t group, BlockQ8_0* rows) {
  ungroup_columns(w, GgmlType::Q8_0_R16, group, rows, [](const uint8_t* in, int r, BlockQ8_0& blk) {
    std::memcpy(&blk.d, in + 2 * r, 2);
    for (int i = 0; i < 32; ++i) blk.qs[i] = int8_t(in[32 + 64 * (i / 4) + 4 * r + i % 4] - 128);
  });
}

}  // namespace moe
