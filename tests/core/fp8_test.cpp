#include "core/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

namespace moe {
namespace {

// The E4M3 value of a code from its fields, written independently of fp8.h.
double expected_value(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? std::ldexp(double(m) / 8, -6) : std::ldexp(1.0 + double(m) / 8, e - 7);
  return s ? -mag : mag;
}

bool is_nan_code(int c) { return (c & 0x7F) == 0x7F; }

TEST(Fp8E4m3, EveryCodeDecodesExactly) {
  for (int c = 0; c < 256; ++c) {
    const float f = fp8_e4m3_to_f32(uint8_t(c));
    if (is_nan_code(c)) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(double(f), expected_value(c)) << c;
    EXPECT_EQ(std::signbit(f), c >= 128) << c;
    EXPECT_EQ(std::bit_cast<uint32_t>(kFp8E4m3ToF32[size_t(c)]), std::bit_cast<uint32_t>(f)) << c;
  }
}

TEST(Fp8E4m3, KnownValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x80), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3C), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xC0), -2.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xFF)));
}

TEST(Fp8E4m3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(c))), c) << c;
  }
}

// Against the nearest code found by brute force (ties to the even code), for values
// between every pair of neighbouring codes: the midpoint and just either side of it.
TEST(Fp8E4m3, RoundsToNearestEven) {
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = expected_value(c), hi = expected_value(c + 1), mid = (lo + hi) / 2;
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(f32_to_fp8_e4m3(float(mid)), even) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(-float(mid)), even | 0x80) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(float(mid), 0.0f)), c) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(float(mid), 1e9f)), c + 1) << c;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: to even 1.0
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3A);  // halfway between 1.125 and 1.25: to 1.25
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half the smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 subnormal units: to 2
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(15.0f, -10)), 0x08);  // 7.5 units: to the first normal
  EXPECT_EQ(f32_to_fp8_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(1e-45f), 0x00);  // an f32 subnormal
}

// Any value within the finite range: the code of the closest value, the even code on a tie.
TEST(Fp8E4m3, EncodesRandomValuesToTheNearestCode) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> log2_mag(-12.0f, 8.81f);  // 2^8.81 is about 448
  for (int i = 0; i < 100000; ++i) {
    const float x = std::exp2(log2_mag(rng)) * (i % 2 ? -1.0f : 1.0f);
    int best = -1;
    double best_err = INFINITY;
    for (int c = 0; c < 256; ++c) {
      if (is_nan_code(c) || (c >= 128) != (x < 0)) continue;
      const double err = std::fabs(expected_value(c) - double(x));
      if (err < best_err || (err == best_err && (c & 1) == 0)) {
        best = c;
        best_err = err;
      }
    }
    ASSERT_EQ(f32_to_fp8_e4m3(x), best) << x;
  }
}

TEST(Fp8E4m3, SaturatesAndMapsNan) {
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(449.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7E);  // the tie with the (missing) 480
  EXPECT_EQ(f32_to_fp8_e4m3(500.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_fp8_e4m3(-NAN), 0x7F);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
}

}  // namespace
}  // namespace moe
