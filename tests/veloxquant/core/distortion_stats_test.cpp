// The statistics every report shares, on hand-computed inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "veloxquant/core/distortion_stats.h"

namespace vc = veloxquant::core;

TEST(DistortionStats, ReconstructionNumbersByHand) {
  vc::DistortionStats s;
  const float x1[] = {1.0f, 0.0f}, h1[] = {0.5f, 0.5f};  // error 0.25 + 0.25 = 0.5
  const float x2[] = {0.0f, 2.0f}, h2[] = {0.0f, 2.0f};  // exact
  s.add_reconstruction(x1, h1, 2);
  s.add_reconstruction(x2, h2, 2);
  EXPECT_EQ(s.vectors(), 2u);
  EXPECT_DOUBLE_EQ(s.mse(), 0.25);                             // (0.5 + 0) / 2
  EXPECT_NEAR(s.snr_db(), 10 * std::log10(5.0 / 0.5), 1e-12);  // signal 1 + 4
  EXPECT_DOUBLE_EQ(s.max_abs_error(), 0.5);
}

TEST(DistortionStats, InnerProductNumbersByHand) {
  vc::DistortionStats s;
  s.add_inner_product(1.0, 2.0);  // error -1
  s.add_inner_product(3.0, 2.0);  // error +1
  s.add_inner_product(2.5, 2.0);  // error +0.5
  EXPECT_NEAR(s.ip_bias(), 0.5 / 3, 1e-12);
  // sample variance of {-1, 1, 0.5}: mean 1/6; squares of deviations sum to 2.1667.
  const double m = 0.5 / 3;
  const double var = ((-1 - m) * (-1 - m) + (1 - m) * (1 - m) + (0.5 - m) * (0.5 - m)) / 2;
  EXPECT_NEAR(s.ip_var(), var, 1e-12);
  EXPECT_NEAR(s.ip_bias_se(), std::sqrt(var / 3), 1e-12);
  EXPECT_NEAR(s.ip_mse(), (1 + 1 + 0.25) / 3, 1e-12);
  EXPECT_NEAR(s.shrink(), 6.5 / 6.0, 1e-12);
}

TEST(DistortionStats, EmptyIsNaNNotZero) {
  vc::DistortionStats s;
  EXPECT_TRUE(std::isnan(s.mse()));
  EXPECT_TRUE(std::isnan(s.ip_bias()));
}
