#include "kernels/q4_k_r16.h"

#include <cstring>

#include "kernels/regroup_columns.h"

namespace moe {
namespace {

// The scales and mins of a column as four 64-byte vectors, one byte per (sub-block, row):
//   S0[16 j + r] = sc_j[r] and S1[16 j + r] = sc_{4+j}[r]   (j = 0..3)
//   M0[32 p + 2 r + e] = m_{2p+e}[r] and M1[...] = m_{4+2p+e}[r]   (p, e = 0, 1)
// (the mins in pairs, so that widened to 16 bits a 32-bit lane holds one row's pair).
// Stored as their low 4 bits, S0 | S1 << 4 at [64, 128) and M0 | M1 << 4 at [128, 192),
// and their high 2 bits, S0 | S1 << 2 | M0 << 4 | M1 << 6 at [192, 256).
constexpr size_t kLowScales = 64, kLowMins = 128, kHighBits = 192, kCodes = 256;

int scale_vector(int j) { return j < 4 ? 0 : 1; }
int scale_index(int j, int r) { return 16 * (j % 4) + r; }
int min_vector(int j) { return j < 4 ? 0 : 1; }
int min_index(int j, int r) { return 32 * ((j % 4) / 2) + 2 * r + j % 2; }

void put(uint8_t* column, size_t low_at, int vec, int idx, int high_shift, uint8_t v) {
  column[low_at + size_t(idx)] |= uint8_t((v & 15) << (4 * vec));
  column[kHighBits + size_t(idx)] |= uint8_t((v >> 4) << high_shift);
}

uint8_t get(const uint8_t* column, size_t low_at, int vec, int idx, int high_shift) {
  return uint8_t(((column[low_at + size_t(idx)] >> (4 * vec)) & 15) |
                 (((column[kHighBits + size_t(idx)] >> high_shift) & 3) << 4));
}

// Scale and min of sub-block j (0..7) of row r (0..15) from a column.
void q4_K_r16_scale_min(const uint8_t* column, int j, int r, uint8_t* sc, uint8_t* m) {
  *sc = get(column, kLowScales, scale_vector(j), scale_index(j, r), 2 * scale_vector(j));
  *m = get(column, kLowMins, min_vector(j), min_index(j, r), 4 + 2 * min_vector(j));
}

}  // namespace

QMatrix regroup_q4_K_r16(const QMatrix& m, uint8_t* dst) {
  return regroup_columns<BlockQ4_K>(
      m, GgmlType::Q4_K, GgmlType::Q4_K_R16, dst, [](uint8_t* out, int r, const BlockQ4_K& blk) {
        std::memcpy(out + 2 * r, &blk.d, 2);
        std::memcpy(out + 32 + 2 * r, &blk.dmin, 2);
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, mn;
          unpack_scale_min_k4(blk.scales, j, &sc, &mn);
          put(out, kLowScales, scale_vector(j), scale_index(j, r), 2 * scale_vector(j), sc);
          put(out, kLowMins, min_vector(j), min_index(j, r), 4 + 2 * min_vector(j), mn);
        }
        for (int c = 0; c < 32; ++c) {
          std::memcpy(out + kCodes + 64 * c + 4 * r, blk.qs + 4 * c, 4);
        }
      });
}

void ungroup_q4_K_r16(const QMatrix& w, int64_t group, BlockQ4_K* rows) {
  ungroup_columns(w, GgmlType::Q4_K_R16, group, rows, [](const uint8_t* in, int r, BlockQ4_K& blk) {
    std::memcpy(&blk.d, in + 2 * r, 2);
    std::memcpy(&blk.dmin, in + 32 + 2 * r, 2);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) q4_K_r16_scale_min(in, j, r, &sc[j], &mn[j]);
    pack_scale_min_k4(sc, mn, blk.scales);
    for (int c = 0; c < 32; ++c) std::memcpy(blk.qs + 4 * c, in + kCodes + 64 * c + 4 * r, 4);
  });
}

}  // namespace moe
