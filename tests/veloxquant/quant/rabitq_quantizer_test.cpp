// RaBitQ at D = 128 (anchors §1.4, §1.5 item 6): <o_bar, o> averages 0.80 (theory sqrt(2/pi));
// the estimator <o_bar,q>/<o_bar,o> is unbiased with error sd ~ 0.067 ||q_perp|| (= 0.0536
// for q = 0.6 o + 0.8 z).
#include <gtest/gtest.h>

#include <cmath>

#include "veloxquant/core/distortion_stats.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/quant_eval.h"
#include "veloxquant/quant/rabitq.h"

namespace vq = veloxquant::quant;

TEST(RaBitQ, AlignmentAndUnbiasedEstimatorAtD128) {
  vq::RaBitQ q(128, 1, 3);
  const std::size_t n = 5000;
  const auto pairs = vq::draw_unit_pairs(128, n, 12);
  std::vector<uint8_t> codes(n * q.code_bytes());
  q.encode(pairs.x.data(), n, codes.data());
  double alignment = 0.0;
  veloxquant::core::DistortionStats stats;
  for (std::size_t i = 0; i < n; ++i) {
    alignment += q.alignment(&codes[i * q.code_bytes()]);
    float est;
    q.score(q.prepare_query(&pairs.y[i * 128]), &codes[i * q.code_bytes()], 1, &est);
    stats.add_inner_product(est, 0.6);
  }
  EXPECT_NEAR(alignment / n, 0.80, 0.01);
  EXPECT_LT(std::abs(stats.ip_bias()), 3 * stats.ip_bias_se());
  EXPECT_NEAR(std::sqrt(stats.ip_var()), 0.0536, 0.1 * 0.0536);
}

TEST(RaBitQ, DecodeIsTheProjectionOnTheVertexAndScoreDividesByAlignment) {
  vq::RaBitQ q(128, 1, 3);
  const auto pairs = vq::draw_unit_pairs(128, 20, 2);
  std::vector<uint8_t> codes(20 * q.code_bytes());
  q.encode(pairs.x.data(), 20, codes.data());
  std::vector<float> dec(20 * 128);
  q.decode(codes.data(), 20, dec.data());
  for (int i = 0; i < 20; ++i) {
    const float a = q.alignment(&codes[i * q.code_bytes()]);
    double err = 0, dot = 0;
    for (int j = 0; j < 128; ++j) {
      err += std::pow(pairs.x[i * 128 + j] - dec[i * 128 + j], 2);
      dot += static_cast<double>(pairs.y[i * 128 + j]) * dec[i * 128 + j];
    }
    EXPECT_NEAR(err, 1.0 - a * a, 1e-4);  // projection onto the unit vertex direction
    float est;
    q.score(q.prepare_query(&pairs.y[i * 128]), &codes[i * q.code_bytes()], 1, &est);
    EXPECT_NEAR(est, dot / (a * a), 1e-4);
  }
  EXPECT_EQ(q.code_bytes(), 16u + 8u);
  EXPECT_THROW(vq::RaBitQ(128, 2, 1), veloxquant::QuantizerConfigError);
}
