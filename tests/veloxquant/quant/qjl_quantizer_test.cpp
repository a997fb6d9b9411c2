// QJL's asymmetric estimator: unbiased, variance [(pi/2)||q||^2||k||^2 - <q,k>^2]/m
// (anchors §1.2; §1.5 item 5: m = d = 128, <q,k> = 0.6 -> 0.00946).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "veloxquant/core/distortion_stats.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/qjl.h"
#include "veloxquant/quant/quant_eval.h"

namespace vq = veloxquant::quant;

TEST(Qjl, UnbiasedWithPaperVarianceAtMEqualsD) {
  veloxquant::core::DistortionStats stats;
  for (int s = 0; s < 8; ++s) {
    vq::Qjl q(128, 1, 40 + s);
    ASSERT_EQ(q.jl_dim(), 128);
    const auto pairs = vq::draw_unit_pairs(128, 500, 70 + s);
    std::vector<uint8_t> codes(500 * q.code_bytes());
    q.encode(pairs.x.data(), 500, codes.data());
    for (int i = 0; i < 500; ++i) {
      float est;
      q.score(q.prepare_query(&pairs.y[static_cast<std::size_t>(i) * 128]), &codes[i * q.code_bytes()], 1, &est);
      stats.add_inner_product(est, 0.6);
    }
  }
  const double theory = (std::numbers::pi / 2 - 0.36) / 128;  // 0.009458
  EXPECT_LT(std::abs(stats.ip_bias()), 3 * stats.ip_bias_se());
  EXPECT_NEAR(stats.ip_mse(), theory, 0.10 * theory);
}

TEST(Qjl, VarianceFallsAsOneOverM) {
  // bits = 2 doubles the sketch (m = 2d): the variance halves.
  const auto one = vq::evaluate_quantizer("qjl", 1, 64, 3000, 8);
  const auto two = vq::evaluate_quantizer("qjl", 2, 64, 3000, 8);
  EXPECT_NEAR(two.ip_var_scaled / one.ip_var_scaled, 0.5, 0.08);
  EXPECT_EQ(one.bytes_per_vector, 8u + 2u);
  EXPECT_EQ(two.bytes_per_vector, 16u + 2u);
}

TEST(Qjl, ExplicitJlDimAndValidation) {
  vq::Qjl q(128, 1, 1, 256);
  EXPECT_EQ(q.jl_dim(), 256);
  EXPECT_EQ(q.code_bytes(), 32u + 2u);
  EXPECT_THROW(vq::Qjl(128, 1, 1, -4), veloxquant::QuantizerConfigError);
  EXPECT_THROW(vq::Qjl(128, 0, 1), veloxquant::QuantizerConfigError);
}
