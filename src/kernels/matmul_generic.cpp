// Plain C++ path: used on CPUs without AVX2, and the second opinion the SIMD paths are
// tested against. The quantized dot products do the same integer arithmetic as the SIMD
// kernels (codes times codes, summed exactly, then scaled per block); only the order of
// the float additions differs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "core/fp8.h"
#include "kernels/matmul_impl.h"
#include "kernels/quant_blocks.h"

namespace moe::mm {

void generic_pack_q8(const float* x, int64_t n, int block, uint8_t* token, const ActLayout& l) {
  int8_t* qs = reinterpret_cast<int8_t*>(token);
  float* d = reinterpret_cast<float*>(token + l.scales_at);
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    int8_t* q = qs + b * block;
    float amax = 0;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    // The SIMD packers compute exactly these operations: same scale, same product, same
    // round-to-nearest-even, so every path sees identical activation codes.
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    d[b] = amax / 127.0f;
    for (int i = 0; i < block; ++i) {
      q[i] = int8_t(std::clamp(int(std::nearbyint(xb[i] * id)), -127, 127));
    }
  }
  if (block == 32) {
    int32_t* s = reinterpret_cast<int32_t*>(token + l.sums_at);
    int32_t* o = reinterpret_cast<int32_t*>(token + l.offsets_at);
    for (int64_t b = 0; b < n / 32; ++b) {
      int32_t sum = 0;
      for (int i = 0; i < 32; ++i) sum += qs[32 * b + i];
      s[b] = sum;
      o[b] = -128 * sum;
    }
  } else {
    int16_t* bs = reinterpret_cast<int16_t*>(token + l.sums_at);
    for (int64_t g = 0; g < n / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qs[16 * g + i];
      bs[g] = int16_t(sum);
    }
  }
}

namespace {

// ---- dot products of one weight row with one packed token ------------------------------

float dot_f32(const float* w, const float* a, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += w[i + k] * a[i + k];
  }
  for (; i < n; ++i) acc[0] += w[i] * a[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename Widen>
float dot_half(const uint16_t* w, const float* a, int64_t n, Widen widen) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += widen(w[i + k]) * a[i + k];
  }
  for (; i < n; ++i) acc[0] += widen(w[i]) * a[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// IEEE half to float through a table of all 65536 values (256 KiB, built on first use):
// a load per weight instead of the core converter's branches, as ggml's generic path does.
const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_f32(uint16_t(h));
    return t;
  }();
  return table.data();
}

float half_fast(uint16_t h) { return half_table()[h]; }

// fp8_e4m3 weights against f32 activations: codes decoded through the 256-entry table,
// each block's products summed unscaled, then multiplied by the block scale once.
float dot_f8(const uint8_t* row, const float* a, int64_t nb) {
  float total = 0;
  for (int64_t b = 0; b < nb; ++b, row += sizeof(BlockF8E4M3), a += kQF8) {
    float d;
    std::memcpy(&d, row, 4);
    const uint8_t* q = row + 4;
    float acc[8] = {};
    for (int i = 0; i < kQF8; i += 8) {
      for (int k = 0; k < 8; ++k) acc[k] += kFp8E4m3ToF32[q[i + k]] * a[i + k];
    }
    total += d * (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
  }
  return total;
}

// Weight codes (decoded per block into a small buffer) times activation codes.
template <typename Code>
int32_t idot(const Code* c, const int8_t* q, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += int32_t(c[i]) * q[i];
  return s;
}

float dot_q8_0(const BlockQ8_0* w, const Q8x32View& a, int64_t nb) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    acc += half_fast(w[b].d) * a.d[b] * float(idot(w[b].qs, a.qs + 32 * b, 32));
  }
  return acc;
}

template <typename Block>
void codes_q4(const Block& b, uint8_t c[32]) {
  for (int i = 0; i < 16; ++i) {
    c[i] = b.qs[i] & 15;
    c[i + 16] = b.qs[i] >> 4;
  }
}

// Byte i of the result is 16 if bit i of `bits` is set, else 0 (eight at a time, in
// 64-bit arithmetic: bit-by-bit loops here were the slowest part of the generic path).
uint64_t spread_bit4(uint32_t bits) {
  uint64_t x = uint64_t(bits & 0xff) * 0x0101010101010101ull;
  x &= 0x8040201008040201ull;
  x = (x + 0x7f7f7f7f7f7f7f7full) & 0x8080808080808080ull;
  return x >> 3;
}

template <typename Block>
void codes_q5(const Block& b, uint8_t c[32]) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  uint64_t q[2];
  std::memcpy(q, b.qs, 16);
  for (int h = 0; h < 2; ++h) {  // elements 8h..8h+7 and 16+8h..16+8h+7
    const uint64_t lo = (q[h] & 0x0f0f0f0f0f0f0f0full) | spread_bit4(qh >> (8 * h));
    const uint64_t hi = ((q[h] >> 4) & 0x0f0f0f0f0f0f0f0full) | spread_bit4(qh >> (16 + 8 * h));
    std::memcpy(c + 8 * h, &lo, 8);
    std::memcpy(c + 16 + 8 * h, &hi, 8);
  }
}

template <typename Block, void (*Codes)(const Block&, uint8_t*), int kOffset>
float dot_q4_5_0(const Block* w, const Q8x32View& a, int64_t nb) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t c[32];
    Codes(w[b], c);
    acc += half_fast(w[b].d) * a.d[b] * float(idot(c, a.qs + 32 * b, 32) - kOffset * a.s[b]);
  }
  return acc;
}

// q4_1 / q5_1: d_w * d_a * sum(q * a) + m_w * d_a * sum(a).
template <typename Block, void (*Codes)(const Block&, uint8_t*)>
float dot_q4_5_1(const Block* w, const Q8x32View& a, int64_t nb) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t c[32];
    Codes(w[b], c);
    acc += half_fast(w[b].d) * a.d[b] * float(idot(c, a.qs + 32 * b, 32)) +
           half_fast(w[b].m) * a.d[b] * float(a.s[b]);
  }
  return acc;
}

// Unsigned codes of a q4_K / q5_K super-block in element order.
void codes_k4(const BlockQ4_K& b, uint8_t c[256]) {
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      c[64 * k + l] = b.qs[32 * k + l] & 15;
      c[64 * k + 32 + l] = b.qs[32 * k + l] >> 4;
    }
  }
}

void codes_k5(const BlockQ5_K& b, uint8_t c[256]) {
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      c[64 * k + l] = uint8_t((b.qs[32 * k + l] & 15) | ((b.qh[l] >> (2 * k)) & 1) << 4);
      c[64 * k + 32 + l] = uint8_t((b.qs[32 * k + l] >> 4) | ((b.qh[l] >> (2 * k + 1)) & 1) << 4);
    }
  }
}

// q4_K and q5_K: sum_j sc_j * dot(codes_j, a_j) scaled by d, minus sum_j m_j * sum(a_j)
// scaled by dmin.
template <typename Block, void (*Codes)(const Block&, uint8_t*)>
float dot_k_asym(const Block* w, const Q8x256View& a, int64_t nsb) {
  float acc = 0;
  for (int64_t b = 0; b < nsb; ++b) {
    const int8_t* q = a.qs + 256 * b;
    const int16_t* bs = a.bsums + 16 * b;
    uint8_t c[256];
    Codes(w[b], c);
    int32_t sum = 0, mins = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(w[b].scales, j, &sc, &m);
      sum += sc * idot(c + 32 * j, q + 32 * j, 32);
      mins += m * (bs[2 * j] + bs[2 * j + 1]);
    }
    acc += a.d[b] * (half_fast(w[b].d) * float(sum) - half_fast(w[b].dmin) * float(mins));
  }
  return acc;
}

float dot_q6_K(const BlockQ6_K* w, const Q8x256View& a, int64_t nsb) {
  float acc = 0;
  for (int64_t b = 0; b < nsb; ++b) {
    const int8_t* q = a.qs + 256 * b;
    const int16_t* bs = a.bsums + 16 * b;
    uint8_t c[256];  // codes + 32, element order
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = w[b].ql + 64 * n;
      const uint8_t* qh = w[b].qh + 32 * n;
      uint8_t* cc = c + 128 * n;
      for (int l = 0; l < 32; ++l) {
        cc[l] = uint8_t((ql[l] & 15) | (qh[l] & 3) << 4);
        cc[l + 32] = uint8_t((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4);
        cc[l + 64] = uint8_t((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
        cc[l + 96] = uint8_t((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
      }
    }
    int32_t sum = 0;
    for (int g = 0; g < 16; ++g) sum += w[b].scales[g] * (idot(c + 16 * g, q + 16 * g, 16) - 32 * bs[g]);
    acc += half_fast(w[b].d) * a.d[b] * float(sum);
  }
  return acc;
}

// ---- row loops --------------------------------------------------------------------------

template <typename Dot>
void each_row_token(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0,
                    int64_t r1, Dot dot) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t t = 0; t < x.n_tokens(); ++t) y[t * ldy + r] = dot(w.row(r), t);
  }
}

void rows_f32(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return dot_f32(reinterpret_cast<const float*>(row), f32_view(x, t), w.cols);
  });
}

template <bool kBf16>
void rows_half(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const float* table = half_table();
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    const auto* h = reinterpret_cast<const uint16_t*>(row);
    if constexpr (kBf16) return dot_half(h, f32_view(x, t), w.cols, bf16_to_f32);
    return dot_half(h, f32_view(x, t), w.cols, [table](uint16_t v) { return table[v]; });
  });
}

void rows_f8(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return dot_f8(row, f32_view(x, t), w.cols / kQF8);
  });
}

template <typename Block, float (*Dot)(const Block*, const Q8x32View&, int64_t)>
void rows_q8x32(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return Dot(reinterpret_cast<const Block*>(row), q8x32_view(x, t), w.cols / 32);
  });
}

template <typename Block, float (*Dot)(const Block*, const Q8x256View&, int64_t)>
void rows_q8x256(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return Dot(reinterpret_cast<const Block*>(row), q8x256_view(x, t), w.cols / 256);
  });
}

}  // namespace

RowsFn generic_rows(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return rows_f32;
    case GgmlType::F16: return rows_half<false>;
    case GgmlType::BF16: return rows_half<true>;
    case GgmlType::Q8_0: return rows_q8x32<BlockQ8_0, dot_q8_0>;
    case GgmlType::Q4_0: return rows_q8x32<BlockQ4_0, dot_q4_5_0<BlockQ4_0, codes_q4<BlockQ4_0>, 8>>;
    case GgmlType::Q5_0: return rows_q8x32<BlockQ5_0, dot_q4_5_0<BlockQ5_0, codes_q5<BlockQ5_0>, 16>>;
    case GgmlType::Q4_1: return rows_q8x32<BlockQ4_1, dot_q4_5_1<BlockQ4_1, codes_q4<BlockQ4_1>>>;
    case GgmlType::Q5_1: return rows_q8x32<BlockQ5_1, dot_q4_5_1<BlockQ5_1, codes_q5<BlockQ5_1>>>;
    case GgmlType::Q4_K: return rows_q8x256<BlockQ4_K, dot_k_asym<BlockQ4_K, codes_k4>>;
    case GgmlType::Q5_K: return rows_q8x256<BlockQ5_K, dot_k_asym<BlockQ5_K, codes_k5>>;
    case GgmlType::Q6_K: return rows_q8x256<BlockQ6_K, dot_q6_K>;
    case GgmlType::F8_E4M3_B128: return rows_f8;
    default: return nullptr;
  }
}

}  // namespace moe::mm
