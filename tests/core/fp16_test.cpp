#include "core/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace moe {
namespace {

TEST(Fp16, KnownValues) {
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(fp16_to_f32(0x0001), 5.9604645e-8f);
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7e00)));
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and the next half: rounds to even (1.0).
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(Bf16, RoundTripAndRounding) {
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // halfway, rounds to even
}

}  // namespace
}  // namespace moe
