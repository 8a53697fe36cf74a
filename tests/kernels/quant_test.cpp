// Block formats against hand-built bytes, and quantize -> dequantize quality per type.
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant_blocks.h"

namespace moe {
namespace {

std::vector<float> dequant(GgmlType t, const void* blocks, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, blocks, y.data(), n);
  return y;
}

TEST(QuantKnownBlocks, FloatTypes) {
  const uint16_t h[4] = {0x3c00, 0xc000, 0x3555, 0x0001};
  const auto f = dequant(GgmlType::F16, h, 4);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 0.333251953125f);
  EXPECT_EQ(f[3], 5.9604645e-8f);
  const uint16_t b[3] = {0x3f80, 0xc040, 0x4049};
  const auto g = dequant(GgmlType::BF16, b, 3);
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], -3.0f);
  EXPECT_EQ(g[2], 3.140625f);
}

TEST(QuantKnownBlocks, Q8_0) {
  uint8_t bytes[34];
  bytes[0] = 0x00;  // d = 0.5 (f16 0x3800), little endian
  bytes[1] = 0x38;
  for (int i = 0; i < 32; ++i) bytes[2 + i] = uint8_t(int8_t(i * 8 - 128));
  const auto y = dequant(GgmlType::Q8_0, bytes, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[size_t(i)], float(i * 8 - 128) * 0.5f) << i;
}

TEST(QuantKnownBlocks, Q4_0LowNibblesFirst) {
  uint8_t bytes[18] = {0x00, 0x40};  // d = 2
  for (int j = 0; j < 16; ++j) bytes[2 + j] = uint8_t(j | ((15 - j) << 4));
  const auto y = dequant(GgmlType::Q4_0, bytes, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], float(j - 8) * 2) << j;
    EXPECT_EQ(y[size_t(j + 16)], float(7 - j) * 2) << j;
  }
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[16], 14.0f);
}

TEST(QuantKnownBlocks, Q5_0HighBitsFromQh) {
  uint8_t bytes[22] = {0x00, 0x3c};  // d = 1
  const uint32_t qh = 0x80010001u;   // bit 0 (element 0), 16 (element 16), 31 (element 31)
  std::memcpy(bytes + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) bytes[6 + j] = uint8_t(0x3A);
  const auto y = dequant(GgmlType::Q5_0, bytes, 32);
  EXPECT_EQ(y[0], float((10 | 16) - 16));   // 10
  EXPECT_EQ(y[1], float(10 - 16));          // -6
  EXPECT_EQ(y[15], float(10 - 16));
  EXPECT_EQ(y[16], float((3 | 16) - 16));   // 3
  EXPECT_EQ(y[17], float(3 - 16));          // -13
  EXPECT_EQ(y[31], 3.0f);
}

TEST(QuantKnownBlocks, Q4_1ScaleThenMinThenNibbles) {
  uint8_t bytes[20] = {0x00, 0x40, 0x00, 0xBE};  // d = 2, m = -1.5
  for (int j = 0; j < 16; ++j) bytes[4 + j] = uint8_t(j | ((15 - j) << 4));
  const auto y = dequant(GgmlType::Q4_1, bytes, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], float(j) * 2 - 1.5f) << j;
    EXPECT_EQ(y[size_t(j + 16)], float(15 - j) * 2 - 1.5f) << j;
  }
  EXPECT_EQ(y[0], -1.5f);
  EXPECT_EQ(y[16], 28.5f);
}

TEST(QuantKnownBlocks, Q5_1HighBitsFromQhAfterTheMin) {
  uint8_t bytes[24] = {0x00, 0x38, 0x00, 0x3c};  // d = 0.5, m = 1
  const uint32_t qh = 0x80010001u;               // elements 0, 16 and 31
  std::memcpy(bytes + 4, &qh, 4);
  for (int j = 0; j < 16; ++j) bytes[8 + j] = uint8_t(0x3A);
  const auto y = dequant(GgmlType::Q5_1, bytes, 32);
  EXPECT_EQ(y[0], 14.0f);   // (10 | 16) * 0.5 + 1
  EXPECT_EQ(y[1], 6.0f);    // 10 * 0.5 + 1
  EXPECT_EQ(y[15], 6.0f);
  EXPECT_EQ(y[16], 10.5f);  // (3 | 16) * 0.5 + 1
  EXPECT_EQ(y[17], 2.5f);   // 3 * 0.5 + 1
  EXPECT_EQ(y[31], 10.5f);
}

TEST(QuantKnownBlocks, Q4_1AndQ5_1QuantizeMinToCodeZeroAndMaxToTheTopCode) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 1.0f + 0.25f * float(i % 16);  // 1 .. 4.75, step 0.25
  uint8_t b4[20], b5[24];
  quantize_row(GgmlType::Q4_1, x, b4, 32);
  quantize_row(GgmlType::Q5_1, x, b5, 32);
  BlockQ4_1 q4;
  BlockQ5_1 q5;
  std::memcpy(&q4, b4, sizeof q4);
  std::memcpy(&q5, b5, sizeof q5);
  EXPECT_EQ(fp16_to_f32(q4.d), 0.25f);
  EXPECT_EQ(fp16_to_f32(q4.m), 1.0f);
  EXPECT_EQ(q4.qs[0], 0x00);
  EXPECT_EQ(q4.qs[15], 0xFF);
  const auto y4 = dequant(GgmlType::Q4_1, b4, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y4[size_t(i)], x[i]) << i;  // exactly on the grid
  EXPECT_EQ(fp16_to_f32(q5.m), 1.0f);
  const auto y5 = dequant(GgmlType::Q5_1, b5, 32);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(y5[size_t(i)], x[i], 0.0625f) << i;
  uint32_t qh;
  std::memcpy(&qh, q5.qh, 4);
  EXPECT_EQ(q5.qs[0] & 15, 0);  // element 0: code 0
  EXPECT_EQ(qh & 1u, 0u);
  EXPECT_EQ(q5.qs[15] & 15, 15);  // element 15: top code 31
  EXPECT_EQ((qh >> 15) & 1u, 1u);
}

// An f32 scale, then 128 E4M3 codes in element order; each value is scale * e4m3(code),
// here computed from the code's fields (sign, 4-bit exponent with bias 7, 3-bit mantissa).
TEST(QuantKnownBlocks, Fp8E4m3) {
  uint8_t bytes[2 * 132];
  const float d[2] = {0.5f, -3.0f};
  for (int b = 0; b < 2; ++b) {
    std::memcpy(bytes + 132 * b, &d[b], 4);
    for (int i = 0; i < 128; ++i) bytes[132 * b + 4 + i] = uint8_t(i + 128 * b);
  }
  const auto y = dequant(GgmlType::F8_E4M3_B128, bytes, 256);
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(y[size_t(c)])) << c;
      continue;
    }
    const int e = (c >> 3) & 15, m = c & 7;
    float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
    if (c & 0x80) v = -v;
    EXPECT_EQ(y[size_t(c)], d[c / 128] * v) << c;
  }
  EXPECT_EQ(y[0x38], 0.5f);            // 1.0
  EXPECT_EQ(y[0x7E], 224.0f);          // 448 * 0.5
  EXPECT_EQ(y[128 + 0x01], 3.0f / 512);  // -2^-9 * -3
}

TEST(GgmlTypes, Fp8E4m3IsInternal) {
  const auto& tr = traits(GgmlType::F8_E4M3_B128);
  EXPECT_EQ(tr.name, "fp8_e4m3");
  EXPECT_EQ(tr.block_size, 128);
  EXPECT_EQ(tr.block_bytes, 132u);
  EXPECT_TRUE(tr.supported);
  EXPECT_EQ(row_bytes(GgmlType::F8_E4M3_B128, 7168), 56u * 132);
  EXPECT_EQ(type_name(GgmlType::F8_E4M3_B128), "fp8_e4m3");
  EXPECT_EQ(parse_type_name("fp8_e4m3"), GgmlType::F8_E4M3_B128);
  EXPECT_EQ(parse_type_name("FP8_E4M3"), GgmlType::F8_E4M3_B128);
  EXPECT_EQ(parse_type_name("q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(parse_type_name("q2_K"), std::nullopt);  // recognised, not supported
  // The GGUF reader and writer validate type ids with ggml_type_traits: never this one.
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::F8_E4M3_B128)), std::nullopt);
  for (uint32_t id = 0; id < 4096; ++id) {
    const auto t = ggml_type_traits(id);
    if (t) {
      EXPECT_NE(t->type, GgmlType::F8_E4M3_B128) << id;
    }
  }
  EXPECT_EQ(ggml_type_traits(8)->type, GgmlType::Q8_0);
}

// Scales {1..7, 63} and mins {0..6, 33}: the 12 bytes below were packed by hand following
// ggml's get_scale_min_k4 (upper two bits of entries 4..7 in the top bits of bytes 0..7).
const uint8_t kScales[8] = {1, 2, 3, 4, 5, 6, 7, 63};
const uint8_t kMins[8] = {0, 1, 2, 3, 4, 5, 6, 33};
const uint8_t kPacked[12] = {0x01, 0x02, 0x03, 0xC4, 0x00, 0x01, 0x02, 0x83, 0x45, 0x56, 0x67, 0x1F};

TEST(QuantKnownBlocks, K4ScalePacking) {
  uint8_t packed[12];
  pack_scale_min_k4(kScales, kMins, packed);
  EXPECT_EQ(std::memcmp(packed, kPacked, 12), 0);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(kPacked, j, &sc, &m);
    EXPECT_EQ(sc, kScales[j]) << j;
    EXPECT_EQ(m, kMins[j]) << j;
  }
}

TEST(QuantKnownBlocks, Q4_K) {
  BlockQ4_K b;
  b.d = 0x3c00;     // 1
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kPacked, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t((i & 15) | ((15 - (i & 15)) << 4));
  static_assert(sizeof(b) == 144);
  const auto y = dequant(GgmlType::Q4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int k = e / 64, l = e % 32, hi = (e / 32) % 2, j = e / 32;
    const int code = hi ? 15 - (l & 15) : (l & 15);
    EXPECT_EQ(y[size_t(e)], float(kScales[j]) * float(code) - 0.5f * float(kMins[j])) << e;
    (void)k;
  }
  EXPECT_EQ(y[224], 63.0f * 15 - 16.5f);  // sub-block 7, high nibble of byte 96
  EXPECT_EQ(y[255], -16.5f);
}

TEST(QuantKnownBlocks, Q5_K) {
  BlockQ5_K b;
  b.d = 0x3c00;
  b.dmin = 0x3c00;
  std::memcpy(b.scales, kPacked, 12);
  for (int l = 0; l < 32; ++l) b.qh[l] = uint8_t(l * 7 + 3);
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t(i * 37 + 11);
  const auto y = dequant(GgmlType::Q5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int k = e / 64, l = e % 32, hi = (e / 32) % 2, j = e / 32;
    const uint8_t byte = b.qs[32 * k + l];
    const int code = (hi ? byte >> 4 : byte & 15) + 16 * ((b.qh[l] >> j) & 1);
    EXPECT_EQ(y[size_t(e)], float(kScales[j]) * float(code) - float(kMins[j])) << e;
  }
  // Element 33 (sub-block 1): qs[1] = 48 -> high nibble 3; qh[1] = 10 has bit 1 set.
  EXPECT_EQ(y[33], 2.0f * (3 + 16) - 1.0f);
}

TEST(QuantKnownBlocks, Q6_K) {
  BlockQ6_K b;
  for (int i = 0; i < 128; ++i) b.ql[i] = uint8_t(i * 29 + 5);
  for (int i = 0; i < 64; ++i) b.qh[i] = uint8_t(i * 53 + 17);
  for (int g = 0; g < 16; ++g) b.scales[g] = int8_t(g * 9 - 70);
  b.d = 0x3400;  // 0.25
  const auto y = dequant(GgmlType::Q6_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    // Element e: half n, quarter c of that half, position l; quarters 0/1 take the low
    // nibbles of ql[l] / ql[l + 32], quarters 2/3 the high ones; qh bits 2c..2c+1.
    const int n = e / 128, c = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b.ql[64 * n + l + 32 * (c & 1)];
    const int nib = c >= 2 ? lo >> 4 : lo & 15;
    const int code = nib | (((b.qh[32 * n + l] >> (2 * c)) & 3) << 4);
    EXPECT_EQ(y[size_t(e)], 0.25f * float(b.scales[e / 16]) * float(code - 32)) << e;
  }
  // Element 64: ql[0] = 5 -> high nibble 0; qh[0] = 17 = 0b00010001 -> bits 4..5 = 1.
  EXPECT_EQ(y[64], 0.25f * float(b.scales[4]) * float(16 - 32));
}

// ---- quantize -> dequantize ---------------------------------------------------------------

double rel_rms_error(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, int64_t(x.size())));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  const auto y = dequant(t, q.data(), int64_t(x.size()));
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += double(y[i] - x[i]) * (y[i] - x[i]);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

// Bounds for Gaussian data, about 1.4x what the formats give: a uniform quantizer with
// step s has rms error s / sqrt(12), and with the block's largest |x| (about 2.5 sigma for
// 32 values) on the top code, s is 2.5 / 127 (q8_0: 0.0057), 2.5 / 8 (q4_0: 0.090),
// 2.5 / 16 (q5_0: 0.045); q4_1/q5_1 spread their codes over the block's range (about 4
// sigma), a step of 4 / 15 (q4_1: 0.077) or 4 / 31 (q5_1: 0.037); the k-quants fit scale and min per 32 (or 16) values and do
// better per bit (measured: q4_K 0.071, q5_K 0.035, q6_K 0.017). f16 keeps 11 significant
// bits (2^-12 relative rounding), bf16 8 bits (2^-9). fp8_e4m3 keeps 4 significant bits:
// a relative step of 2^-3 to 2^-4, rms error about 2^-3.5 / sqrt(12) (0.026); measured 0.026.
struct Bound {
  GgmlType type;
  double max_rel_rms;
};

TEST(QuantRoundTrip, ErrorWithinFormatBounds) {
  const Bound bounds[] = {
      {GgmlType::F32, 0.0},      {GgmlType::F16, 3e-4},     {GgmlType::BF16, 2.5e-3},
      {GgmlType::Q8_0, 0.0075},  {GgmlType::Q4_0, 0.12},    {GgmlType::Q5_0, 0.06},
      {GgmlType::Q4_1, 0.11},    {GgmlType::Q5_1, 0.055},
      {GgmlType::Q4_K, 0.1},     {GgmlType::Q5_K, 0.05},    {GgmlType::Q6_K, 0.025},
      {GgmlType::F8_E4M3_B128, 0.036},
  };
  const auto x = gaussian(4096, 7);
  for (const auto& b : bounds) {
    const double e = rel_rms_error(b.type, x);
    EXPECT_LE(e, b.max_rel_rms) << type_name(b.type);
    RecordProperty(std::string(type_name(b.type)), std::to_string(e));
  }
}

TEST(QuantRoundTrip, MoreBitsLessError) {
  const auto x = gaussian(8192, 11);
  EXPECT_LT(rel_rms_error(GgmlType::Q5_0, x), rel_rms_error(GgmlType::Q4_0, x));
  EXPECT_LT(rel_rms_error(GgmlType::Q8_0, x), rel_rms_error(GgmlType::Q5_0, x));
  EXPECT_LT(rel_rms_error(GgmlType::Q5_1, x), rel_rms_error(GgmlType::Q4_1, x));
  EXPECT_LT(rel_rms_error(GgmlType::Q8_0, x), rel_rms_error(GgmlType::Q5_1, x));
  EXPECT_LT(rel_rms_error(GgmlType::Q5_K, x), rel_rms_error(GgmlType::Q4_K, x));
  EXPECT_LT(rel_rms_error(GgmlType::Q6_K, x), rel_rms_error(GgmlType::Q5_K, x));
}

TEST(QuantRoundTrip, ZerosConstantsAndOutliers) {
  const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q5_1,
                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::F8_E4M3_B128};
  for (GgmlType t : types) {
    std::vector<float> zeros(512, 0.0f);
    std::vector<uint8_t> q(row_bytes(t, 512));
    quantize_row(t, zeros.data(), q.data(), 512);
    for (float v : dequant(t, q.data(), 512)) ASSERT_EQ(v, 0.0f) << type_name(t);

    // A constant positive row: representable through the scale (and min) exactly enough.
    std::vector<float> c(512, 0.75f);
    quantize_row(t, c.data(), q.data(), 512);
    for (float v : dequant(t, q.data(), 512)) ASSERT_NEAR(v, 0.75f, 0.75f * 0.01f) << type_name(t);

    // One huge value per block: it must come back close, small ones may flush to zero.
    auto x = gaussian(512, 3);
    for (size_t i = 0; i < x.size(); i += 64) x[i] = 1000.0f;
    quantize_row(t, x.data(), q.data(), 512);
    const auto y = dequant(t, q.data(), 512);
    for (size_t i = 0; i < x.size(); i += 64) EXPECT_NEAR(y[i], 1000.0f, 1000.0f * 0.07f) << type_name(t);
  }
}

TEST(QuantRoundTrip, RaggedRowLengths) {
  // Every whole number of blocks works, row by row, and equals quantizing block by block.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q5_1,
                     GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F8_E4M3_B128}) {
    const int64_t block = traits(t).block_size;
    for (int64_t nb = 1; nb <= 5; ++nb) {
      const int64_t n = nb * block;
      const auto x = gaussian(size_t(n), uint32_t(nb));
      std::vector<uint8_t> whole(row_bytes(t, n)), parts(row_bytes(t, n));
      quantize_row(t, x.data(), whole.data(), n);
      for (int64_t b = 0; b < nb; ++b) {
        quantize_row(t, x.data() + b * block, parts.data() + b * traits(t).block_bytes, block);
      }
      EXPECT_EQ(whole, parts) << type_name(t) << " " << n;
      EXPECT_LT(rel_rms_error(t, x), 0.2) << type_name(t) << " " << n;
    }
  }
}

// Per element, not just on average: the block's largest |x| maps to 448 exactly enough
// to come back within float rounding, and every value is within half an E4M3 step of the
// value scaled by the block scale d (2^-4 relative for normals, d * 2^-10 for subnormals).
TEST(QuantRoundTrip, Fp8E4m3ElementErrors) {
  auto x = gaussian(1024, 5);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 1e-4f;  // some values in the subnormal range
  std::fill(x.begin() + 256, x.begin() + 384, 0.0f);        // one zero block
  std::vector<uint8_t> q(row_bytes(GgmlType::F8_E4M3_B128, 1024));
  quantize_row(GgmlType::F8_E4M3_B128, x.data(), q.data(), 1024);
  const auto y = dequant(GgmlType::F8_E4M3_B128, q.data(), 1024);
  for (int b = 0; b < 8; ++b) {
    float d, amax = 0;
    std::memcpy(&d, q.data() + 132 * b, 4);
    for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[size_t(128 * b + i)]));
    EXPECT_EQ(d, amax / 448) << b;
    for (int i = 0; i < 128; ++i) {
      const size_t k = size_t(128 * b + i);
      if (b == 2) {
        EXPECT_EQ(q[size_t(132 * b + 4 + i)], 0);
        EXPECT_EQ(y[k], 0.0f);
        continue;
      }
      const double bound = std::max(std::fabs(double(x[k])) / 16, double(d) * std::ldexp(1.0, -10)) * (1 + 1e-6);
      EXPECT_LE(std::fabs(double(y[k]) - x[k]), bound) << k;
      if (std::fabs(x[k]) == amax) {
        EXPECT_NEAR(std::fabs(y[k]), amax, amax * 1e-6) << k;
      }
    }
  }
}

TEST(QuantRoundTrip, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, x.data(), q.data(), 33), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_K, q.data(), x.data(), 255), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q2_K, x.data(), q.data(), 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::F8_E4M3_B128, x.data(), q.data(), 64), Error);
  EXPECT_NO_THROW(quantize_row(GgmlType::F16, x.data(), q.data(), 7));
}

}  // namespace
}  // namespace moe
