// Reference quantizers and dequantizers for every supported weight type. Dequantization
// repeats ggml's arithmetic operation by operation (same products, same order) so a
// model decodes to the same floats here as in llama.cpp (fp8_e4m3, not a ggml type,
// decodes as scale * e4m3 like the checkpoint loader). Quantization only has to be
// good, not identical to ggml: the k-quant scale searches below are our own.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "core/fp8.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace moe {
namespace {

int nearest(float x) { return int(std::nearbyint(x)); }

// ---- q8_0 / q4_0 / q5_0 / q4_1 / q5_1 (ggml's reference rounding) ----------------------------------

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK0) {
    float amax = 0;
    for (int j = 0; j < kQK0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1 / d : 0;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK0; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

// The element of largest magnitude, with its sign: q4_0/q5_0 map it to the code -8/-16,
// which uses the one extra negative level of the two's complement range.
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK0) {
    const float d = signed_absmax(x, kQK0) / -8;
    const float id = d != 0 ? 1 / d : 0;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK0) {
    const float d = signed_absmax(x, kQK0) / -16;
    const float id = d != 0 ? 1 / d : 0;
    y[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, int(int8_t(x[j] * id + 16.5f)));
      const int q1 = std::min(31, int(int8_t(x[j + 16] * id + 16.5f)));
      y[i].qs[j] = uint8_t((q0 & 15) | ((q1 & 15) << 4));
      qh |= uint32_t(q0 >> 4) << j;
      qh |= uint32_t(q1 >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

// q4_1 / q5_1: the block's minimum is code 0 and its maximum the top code (15 or 31);
// the codes are rounded from the exact min and step, the stored d and m are f16.
void block_min_max(const float* x, float* lo, float* hi) {
  *lo = x[0];
  *hi = x[0];
  for (int j = 1; j < kQK0; ++j) {
    *lo = std::min(*lo, x[j]);
    *hi = std::max(*hi, x[j]);
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK0) {
    float lo, hi;
    block_min_max(x, &lo, &hi);
    const float d = (hi - lo) / 15;
    const float id = d != 0 ? 1 / d : 0;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(lo);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, int((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(15, int((x[j + 16] - lo) * id + 0.5f));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK0) {
    float lo, hi;
    block_min_max(x, &lo, &hi);
    const float d = (hi - lo) / 31;
    const float id = d != 0 ? 1 / d : 0;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(lo);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, int((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(31, int((x[j + 16] - lo) * id + 0.5f));
      y[i].qs[j] = uint8_t((q0 & 15) | ((q1 & 15) << 4));
      qh |= uint32_t(q0 >> 4) << j;
      qh |= uint32_t(q1 >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK0) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK0; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK0) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = float((x[i].qs[j] & 15) - 8) * d;
      y[j + 16] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK0) {
    const float d = fp16_to_f32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int h0 = int((qh >> j) & 1) << 4;
      const int h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = float(((x[i].qs[j] & 15) | h0) - 16) * d;
      y[j + 16] = float(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK0) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = float(x[i].qs[j] & 15) * d + m;
      y[j + 16] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK0) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int h0 = int((qh >> j) & 1) << 4;
      const int h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = float((x[i].qs[j] & 15) | h0) * d + m;
      y[j + 16] = float((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

// ---- k-quant scale searches -----------------------------------------------------------

// Fits x[i] ~ scale * q[i] - min with q in [0, nmax] and min >= 0 (the grid always
// contains 0, as in ggml). Tries a fan of step sizes around the plain range/nmax one and
// refits (scale, min) by least squares for each assignment; keeps the lowest error.
void fit_scale_min(const float* x, int n, int nmax, float* scale, float* min) {
  float lo = 0, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (!(hi - lo > 1e-30f)) {
    *scale = 0;
    *min = -lo;
    return;
  }
  float best_err = INFINITY, best_s = (hi - lo) / nmax, best_b = lo;
  for (int step = -10; step <= 10; ++step) {
    const float iscale = (nmax + 0.1f * step) / (hi - lo);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    int q[256];
    for (int i = 0; i < n; ++i) {
      q[i] = std::clamp(nearest((x[i] - lo) * iscale), 0, nmax);
      sq += q[i];
      sqq += double(q[i]) * q[i];
      sx += x[i];
      sqx += double(q[i]) * x[i];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double s = (n * sqx - sq * sx) / det;
    double b = (sqq * sx - sq * sqx) / det;
    if (b > 0) {  // a positive offset is not representable (min must be >= 0)
      b = 0;
      s = sqx / sqq;
    }
    if (s < 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] + b - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = float(err);
      best_s = float(s);
      best_b = float(b);
    }
  }
  *scale = best_s;
  *min = -best_b;
}

// Fits x[i] ~ scale * q[i] with q in [-nmax, nmax - 1]; the sign of scale is chosen so the
// largest magnitude lands on -nmax (one level more than the positive side has).
float fit_scale_symmetric(const float* x, int n, int nmax) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < 1e-30f) return 0;
  float best_err = INFINITY, best_s = -max / nmax;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(nmax + 0.1f * step) / max;
    double sqq = 0, sqx = 0;
    int q[32];
    for (int i = 0; i < n; ++i) {
      q[i] = std::clamp(nearest(x[i] * iscale), -nmax, nmax - 1);
      sqq += double(q[i]) * q[i];
      sqx += double(q[i]) * x[i];
    }
    if (sqq <= 0) continue;
    const double s = sqx / sqq;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = float(err);
      best_s = float(s);
    }
  }
  return best_s;
}

// Shared by q4_K and q5_K: per 32-element sub-block 6-bit scale and min, then the final
// codes recomputed with the scales as stored (f16 super-scales times 6-bit integers).
void quantize_k_asym(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                     uint8_t packed[12], uint8_t q[256]) {
  float scale[8], min[8], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    fit_scale_min(x + 32 * j, 32, nmax, &scale[j], &min[j]);
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  *d_out = f32_to_fp16(max_scale / 63);
  *dmin_out = f32_to_fp16(max_min / 63);
  const float d = fp16_to_f32(*d_out), dmin = fp16_to_f32(*dmin_out);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = uint8_t(d > 0 ? std::clamp(nearest(scale[j] / d), 0, 63) : 0);
    m[j] = uint8_t(dmin > 0 ? std::clamp(nearest(min[j] / dmin), 0, 63) : 0);
  }
  pack_scale_min_k4(sc, m, packed);
  for (int j = 0; j < 8; ++j) {
    const float s = d * sc[j], mn = dmin * m[j];
    for (int i = 0; i < 32; ++i) {
      q[32 * j + i] = uint8_t(s > 0 ? std::clamp(nearest((x[32 * j + i] + mn) / s), 0, nmax) : 0);
    }
  }
}

void quantize_q4_K(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t q[256];
    quantize_k_asym(x, 15, &y[i].d, &y[i].dmin, y[i].scales, q);
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) y[i].qs[32 * k + l] = uint8_t(q[64 * k + l] | (q[64 * k + 32 + l] << 4));
    }
  }
}

void quantize_q5_K(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t q[256];
    quantize_k_asym(x, 31, &y[i].d, &y[i].dmin, y[i].scales, q);
    std::memset(y[i].qh, 0, 32);
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * k + l], hi = q[64 * k + 32 + l];
        y[i].qs[32 * k + l] = uint8_t((lo & 15) | ((hi & 15) << 4));
        y[i].qh[l] |= uint8_t(((lo >> 4) << (2 * k)) | ((hi >> 4) << (2 * k + 1)));
      }
    }
  }
}

void quantize_q6_K(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scale[16], amax = 0;
    for (int g = 0; g < 16; ++g) {
      scale[g] = fit_scale_symmetric(x + 16 * g, 16, 32);
      amax = std::max(amax, std::fabs(scale[g]));
    }
    y[i].d = f32_to_fp16(amax / 127);
    const float d = fp16_to_f32(y[i].d);
    uint8_t q[256];
    for (int g = 0; g < 16; ++g) {
      const int sc = d > 0 ? std::clamp(nearest(scale[g] / d), -127, 127) : 0;
      y[i].scales[g] = int8_t(sc);
      const float s = d * float(sc);
      for (int l = 0; l < 16; ++l) {
        const int v = s != 0 ? std::clamp(nearest(x[16 * g + l] / s), -32, 31) : 0;
        q[16 * g + l] = uint8_t(v + 32);
      }
    }
    for (int n = 0; n < 2; ++n) {
      uint8_t* ql = y[i].ql + 64 * n;
      uint8_t* qh = y[i].qh + 32 * n;
      const uint8_t* qq = q + 128 * n;
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
        ql[l + 32] = uint8_t((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
        qh[l] = uint8_t((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                        ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

// ---- k-quant dequantization (ggml's arithmetic) ---------------------------------------

void dequantize_q4_K(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int k = 0; k < 4; ++k, q += 32) {
      uint8_t sc, m;
      unpack_scale_min_k4(x[i].scales, 2 * k, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      unpack_scale_min_k4(x[i].scales, 2 * k + 1, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 15) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_K(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int k = 0; k < 4; ++k, q += 32) {
      uint8_t sc, m;
      unpack_scale_min_k4(x[i].scales, 2 * k, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      unpack_scale_min_k4(x[i].scales, 2 * k + 1, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      const int u1 = 1 << (2 * k), u2 = 2 << (2 * k);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((q[l] & 15) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequantize_q6_K(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int n = 0; n < 2; ++n, y += 128) {
      const uint8_t* ql = x[i].ql + 64 * n;
      const uint8_t* qh = x[i].qh + 32 * n;
      const int8_t* sc = x[i].scales + 8 * n;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

// ---- fp8_e4m3 (DeepSeek's layout: one scale per 128 values) ---------------------------

// The block's largest magnitude lands on 448, the top E4M3 value. A zero block keeps
// scale 0 (and codes 0) so it dequantizes to exact zeros.
void quantize_f8(const float* x, uint8_t* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQF8, y += sizeof(BlockF8E4M3)) {
    float amax = 0;
    for (int j = 0; j < kQF8; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / kFp8E4m3Max;
    std::memcpy(y, &d, 4);
    // x / d can come out a rounding step above 448; the encoder saturates it to 448.
    for (int j = 0; j < kQF8; ++j) y[4 + j] = d != 0 ? f32_to_fp8_e4m3(x[j] / d) : 0;
  }
}

void dequantize_f8(const uint8_t* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += sizeof(BlockF8E4M3), y += kQF8) {
    float d;
    std::memcpy(&d, x, 4);
    for (int j = 0; j < kQF8; ++j) y[j] = d * fp8_e4m3_to_f32(x[4 + j]);
  }
}

void check_length(GgmlType t, int64_t n) {
  const auto& tr = traits(t);
  if (is_regrouped(t)) fail("{} rows are interleaved 16 at a time: ungroup them first (kernels/regrouped.h)", tr.name);
  if (!tr.supported) fail("tensor type {} is not supported for (de)quantization", tr.name);
  if (n < 0 || n % tr.block_size != 0) {
    fail("a row of {} elements is not a whole number of {} blocks ({} elements each)", n, tr.name,
         tr.block_size);
  }
}

}  // namespace

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  check_length(t, n);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_fp16(src[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    case GgmlType::Q8_0: return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n / kQK0);
    case GgmlType::Q4_0: return quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n / kQK0);
    case GgmlType::Q5_0: return quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n / kQK0);
    case GgmlType::Q4_1: return quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n / kQK0);
    case GgmlType::Q5_1: return quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n / kQK0);
    case GgmlType::Q4_K: return quantize_q4_K(src, static_cast<BlockQ4_K*>(dst), n / kQKK);
    case GgmlType::Q5_K: return quantize_q5_K(src, static_cast<BlockQ5_K*>(dst), n / kQKK);
    case GgmlType::Q6_K: return quantize_q6_K(src, static_cast<BlockQ6_K*>(dst), n / kQKK);
    case GgmlType::F8_E4M3_B128: return quantize_f8(src, static_cast<uint8_t*>(dst), n / kQF8);
    default: break;
  }
  fail("quantize_row: no quantizer for {}", type_name(t));
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  check_length(t, n);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / kQK0);
    case GgmlType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / kQK0);
    case GgmlType::Q5_0: return dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, n / kQK0);
    case GgmlType::Q4_1: return dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, n / kQK0);
    case GgmlType::Q5_1: return dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, n / kQK0);
    case GgmlType::Q4_K: return dequantize_q4_K(static_cast<const BlockQ4_K*>(src), dst, n / kQKK);
    case GgmlType::Q5_K: return dequantize_q5_K(static_cast<const BlockQ5_K*>(src), dst, n / kQKK);
    case GgmlType::Q6_K: return dequantize_q6_K(static_cast<const BlockQ6_K*>(src), dst, n / kQKK);
    case GgmlType::F8_E4M3_B128: return dequantize_f8(static_cast<const uint8_t*>(src), dst, n / kQF8);
    default: break;
  }
  fail("dequantize_row: no dequantizer for {}", type_name(t));
}

}  // namespace moe
