// Plain C++ path: used on CPUs without AVX2, and the second opinion the SIMD paths are
// tested against. The quantized dot products do the same integer arithmetic as the SIMD
// kernels (codes times codes, summed exactly, then scaled per block); only the order of
// the float additions differs.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
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
    for (int64_t b = 0; b < n / 32; ++b) {
      int32_t sum = 0;
      for (int i = 0; i < 32; ++i) sum += qs[32 * b + i];
      s[b] = sum;
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

template <float (*Widen)(uint16_t)>
float dot_half(const uint16_t* w, const float* a, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += Widen(w[i + k]) * a[i + k];
  }
  for (; i < n; ++i) acc[0] += Widen(w[i]) * a[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

float dot_q8_0(const BlockQ8_0* w, const Q8x32View& a, int64_t nb) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += int32_t(w[b].qs[i]) * a.qs[32 * b + i];
    acc += fp16_to_f32(w[b].d) * a.d[b] * float(s);
  }
  return acc;
}

float dot_q4_0(const BlockQ4_0* w, const Q8x32View& a, int64_t nb) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* q = a.qs + 32 * b;
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) s += (w[b].qs[i] & 15) * q[i] + (w[b].qs[i] >> 4) * q[i + 16];
    acc += fp16_to_f32(w[b].d) * a.d[b] * float(s - 8 * a.s[b]);
  }
  return acc;
}

float dot_q5_0(const BlockQ5_0* w, const Q8x32View& a, int64_t nb) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* q = a.qs + 32 * b;
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) {
      const int lo = (w[b].qs[i] & 15) | int((qh >> i) & 1) << 4;
      const int hi = (w[b].qs[i] >> 4) | int((qh >> (i + 16)) & 1) << 4;
      s += lo * q[i] + hi * q[i + 16];
    }
    acc += fp16_to_f32(w[b].d) * a.d[b] * float(s - 16 * a.s[b]);
  }
  return acc;
}

// q4_K and q5_K: sum_j sc_j * dot(codes_j, a_j) scaled by d, minus sum_j m_j * sum(a_j)
// scaled by dmin; codes(k, l, hi) gives the unsigned code of element 64k + 32hi + l.
template <typename Block, typename Codes>
float dot_k_asym(const Block* w, const Q8x256View& a, int64_t nsb, Codes codes) {
  float acc = 0;
  for (int64_t b = 0; b < nsb; ++b) {
    const int8_t* q = a.qs + 256 * b;
    const int16_t* bs = a.bsums + 16 * b;
    int32_t sum = 0, mins = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(w[b].scales, j, &sc, &m);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += codes(w[b], j / 2, l, j % 2) * q[32 * j + l];
      sum += sc * s;
      mins += m * (bs[2 * j] + bs[2 * j + 1]);
    }
    acc += a.d[b] * (fp16_to_f32(w[b].d) * float(sum) - fp16_to_f32(w[b].dmin) * float(mins));
  }
  return acc;
}

float dot_q6_K(const BlockQ6_K* w, const Q8x256View& a, int64_t nsb) {
  float acc = 0;
  for (int64_t b = 0; b < nsb; ++b) {
    const int8_t* q = a.qs + 256 * b;
    const int16_t* bs = a.bsums + 16 * b;
    int32_t sum = 0;
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = w[b].ql + 64 * n;
      const uint8_t* qh = w[b].qh + 32 * n;
      int32_t s[8] = {};  // per 16-element group of this half
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        const int8_t* qq = q + 128 * n + l;
        s[g] += ((ql[l] & 15) | ((qh[l] & 3) << 4)) * qq[0];
        s[g + 2] += ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) * qq[32];
        s[g + 4] += ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) * qq[64];
        s[g + 6] += ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) * qq[96];
      }
      for (int g = 0; g < 8; ++g) sum += w[b].scales[8 * n + g] * (s[g] - 32 * bs[8 * n + g]);
    }
    acc += fp16_to_f32(w[b].d) * a.d[b] * float(sum);
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

template <float (*Widen)(uint16_t)>
void rows_half(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return dot_half<Widen>(reinterpret_cast<const uint16_t*>(row), f32_view(x, t), w.cols);
  });
}

template <typename Block, float (*Dot)(const Block*, const Q8x32View&, int64_t)>
void rows_q8x32(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return Dot(reinterpret_cast<const Block*>(row), q8x32_view(x, t), w.cols / 32);
  });
}

void rows_q4_K(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  auto codes = [](const BlockQ4_K& b, int k, int l, int hi) {
    return hi ? b.qs[32 * k + l] >> 4 : b.qs[32 * k + l] & 15;
  };
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return dot_k_asym(reinterpret_cast<const BlockQ4_K*>(row), q8x256_view(x, t), w.cols / 256, codes);
  });
}

void rows_q5_K(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  auto codes = [](const BlockQ5_K& b, int k, int l, int hi) {
    const int lo4 = hi ? b.qs[32 * k + l] >> 4 : b.qs[32 * k + l] & 15;
    return lo4 | ((b.qh[l] >> (2 * k + hi)) & 1) << 4;
  };
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return dot_k_asym(reinterpret_cast<const BlockQ5_K*>(row), q8x256_view(x, t), w.cols / 256, codes);
  });
}

void rows_q6_K(const QMatrix& w, const PackedActs& x, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  each_row_token(w, x, y, ldy, r0, r1, [&](const uint8_t* row, int64_t t) {
    return dot_q6_K(reinterpret_cast<const BlockQ6_K*>(row), q8x256_view(x, t), w.cols / 256);
  });
}

}  // namespace

RowsFn generic_rows(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return rows_f32;
    case GgmlType::F16: return rows_half<fp16_to_f32>;
    case GgmlType::BF16: return rows_half<bf16_to_f32>;
    case GgmlType::Q8_0: return rows_q8x32<BlockQ8_0, dot_q8_0>;
    case GgmlType::Q4_0: return rows_q8x32<BlockQ4_0, dot_q4_0>;
    case GgmlType::Q5_0: return rows_q8x32<BlockQ5_0, dot_q5_0>;
    case GgmlType::Q4_K: return rows_q4_K;
    case GgmlType::Q5_K: return rows_q5_K;
    case GgmlType::Q6_K: return rows_q6_K;
    default: return nullptr;
  }
}

}  // namespace moe::mm
