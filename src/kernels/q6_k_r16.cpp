#include "kernels/q6_k_r16.h"

#include <cstring>

#include "kernels/regroup_columns.h"

namespace moe {
namespace {

constexpr size_t kScales = 32, kLow = 288, kHigh = 2336;

// Code i (0..255) of a q6_K super-block, 0..63: where dequantize_row_q6_K takes it from.
struct CodeBits {
  int ql;        // byte of ql
  int ql_shift;  // 0 or 4
  int qh;        // byte of qh
  int qh_shift;  // 0, 2, 4 or 6
};

CodeBits q6_code_bits(int i) {
  const int n = i / 128, l = i % 32, quarter = (i % 128) / 32;
  return {64 * n + l + (quarter % 2) * 32, (quarter / 2) * 4, 32 * n + l, 2 * quarter};
}

// Where code i of row r lies in a q6_K_r16 column: its low 4 bits, then its high 2 bits.
CodeBits r16_code_bits(int i, int r) {
  const int p = i / 64, within = i % 64, odd = within / 32, k = within % 32;  // k: 4 v + j
  const int v = k / 4, j = k % 4, w = v % 4, upper = v / 4;
  return {int(kLow) + 512 * p + 64 * v + 4 * r + j, 4 * odd, int(kHigh) + 256 * p + 64 * w + 4 * r + j,
          2 * odd + 4 * upper};
}

}  // namespace

QMatrix regroup_q6_K_r16(const QMatrix& m, uint8_t* dst) {
  return regroup_columns<BlockQ6_K>(
      m, GgmlType::Q6_K, GgmlType::Q6_K_R16, dst, [](uint8_t* out, int r, const BlockQ6_K& blk) {
        std::memcpy(out + 2 * r, &blk.d, 2);
        for (int s = 0; s < 16; ++s) {
          out[kScales + 32 * (s / 2) + 2 * r + s % 2] = uint8_t(blk.scales[s]);
        }
        for (int i = 0; i < 256; ++i) {
          const CodeBits from = q6_code_bits(i), to = r16_code_bits(i, r);
          const int q = ((blk.ql[from.ql] >> from.ql_shift) & 15) | (((blk.qh[from.qh] >> from.qh_shift) & 3) << 4);
          out[to.ql] |= uint8_t((q & 15) << to.ql_shift);
          out[to.qh] |= uint8_t((q >> 4) << to.qh_shift);
        }
      });
}

void ungroup_q6_K_r16(const QMatrix& w, int64_t group, BlockQ6_K* rows) {
  ungroup_columns(w, GgmlType::Q6_K_R16, group, rows, [](const uint8_t* in, int r, BlockQ6_K& blk) {
    std::memcpy(&blk.d, in + 2 * r, 2);
    for (int s = 0; s < 16; ++s) blk.scales[s] = int8_t(in[kScales + 32 * (s / 2) + 2 * r + s % 2]);
    for (int i = 0; i < 256; ++i) {
      const CodeBits from = r16_code_bits(i, r), to = q6_code_bits(i);
      const int q = ((in[from.ql] >> from.ql_shift) & 15) | (((in[from.qh] >> from.qh_shift) & 3) << 4);
      blk.ql[to.ql] |= uint8_t((q & 15) << to.ql_shift);
      blk.qh[to.qh] |= uint8_t((q >> 4) << to.qh_shift);
    }
  });
}

}  // namespace moe
