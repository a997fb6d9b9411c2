// f16/bf16 conversions: exact round trips and round-to-nearest-even on known bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/half.h"

TEST(Half, F16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = base::f16_to_f32(bits);
    if (std::isnan(f)) continue;
    EXPECT_EQ(base::f32_to_f16(f), bits) << "bits " << h;
  }
}

TEST(Half, F16KnownValues) {
  EXPECT_EQ(base::f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(base::f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(base::f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(base::f32_to_f16(65520.0f), 0x7c00);                // rounds to inf
  EXPECT_EQ(base::f32_to_f16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(base::f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(base::f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(base::f16_to_f32(base::f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(base::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(base::bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even.
  EXPECT_EQ(base::f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(base::f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // 1e30f is 0x7149f2ca: the low half 0xf2ca is above the midpoint, so it rounds up.
  EXPECT_EQ(base::f32_to_bf16(1e30f), 0x714a);
}
