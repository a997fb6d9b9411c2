// RaBitQ at D = 128 (anchors §1.4, §1.5 item 6): <o_bar, o> averages 0.80 (theory sqrt(2/pi));
// the estimator <o_bar,q>/<o_bar,o> is unbiased with error sd ~ 0.067 ||q_perp|| (= 0.0536
// for q = 0.6 o + 0.8 z).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "veloxquant/core/distortion_stats.h"
#include "veloxquant/core/rng.h"
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
  std::vector<float> dec(std::size_t{20} * 128);
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
    q.score(q.prepare_query(&pairs.y[static_cast<std::size_t>(i) * 128]), &codes[i * q.code_bytes()], 1, &est);
    EXPECT_NEAR(est, dot / (a * a), 1e-4);
  }
  EXPECT_EQ(q.code_bytes(), 16u + 8u);
  EXPECT_THROW(vq::RaBitQ(128, 0, 1), veloxquant::QuantizerConfigError);
  EXPECT_THROW(vq::RaBitQ(128, 9, 1), veloxquant::QuantizerConfigError);
}

TEST(RaBitQ, GridSweepFindsTheBruteForceOptimum) {
  // d = 6, B = 2 (levels +-1/2, +-3/2): enumerate all 4^6 grid points, compare cosines.
  veloxquant::core::Rng rng(21);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> r(6);
    for (auto& v : r) v = static_cast<float>(rng.normal());
    double brute = -1.0;
    for (int code = 0; code < 4096; ++code) {
      double dot = 0, len = 0;
      for (int j = 0; j < 6; ++j) {
        const double y = ((code >> (2 * j)) & 3) - 1.5;
        dot += y * r[j];
        len += y * y;
      }
      double rn = 0;
      for (float v : r) rn += static_cast<double>(v) * v;
      brute = std::max(brute, dot / std::sqrt(len * rn));
    }
    double rn = 0;
    for (float v : r) rn += static_cast<double>(v) * v;
    std::vector<float> y;
    const double swept = vq::RaBitQ::best_grid_point(r.data(), 6, 2, y) / std::sqrt(rn);
    EXPECT_NEAR(swept, brute, 1e-9) << trial;
  }
}

TEST(RaBitQ, MultiBitStaysUnbiasedAndTightens) {
  // The extension keeps the estimator unbiased while <o_bar, o> rises toward 1 and the
  // error variance falls with every added bit.
  double previous_var = 1.0, previous_alignment = 0.0;
  for (int bits = 1; bits <= 4; ++bits) {
    vq::RaBitQ q(128, bits, 3);
    const std::size_t n = 2000;
    const auto pairs = vq::draw_unit_pairs(128, n, 12);
    std::vector<uint8_t> codes(n * q.code_bytes());
    q.encode(pairs.x.data(), n, codes.data());
    veloxquant::core::DistortionStats stats;
    double alignment = 0.0;
    std::vector<float> dec(128);
    for (std::size_t i = 0; i < n; ++i) {
      const uint8_t* code = &codes[i * q.code_bytes()];
      alignment += q.alignment(code);
      float est;
      q.score(q.prepare_query(&pairs.y[i * 128]), code, 1, &est);
      stats.add_inner_product(est, 0.6);
      if (i < 20) {  // score = <q, decode> / <o_bar, o>^2
        q.decode(code, 1, dec.data());
        double dot = 0;
        for (int j = 0; j < 128; ++j) dot += static_cast<double>(pairs.y[i * 128 + j]) * dec[j];
        EXPECT_NEAR(est, dot / std::pow(q.alignment(code), 2), 1e-4);
      }
    }
    EXPECT_LT(std::abs(stats.ip_bias()), 3 * stats.ip_bias_se()) << "B=" << bits;
    EXPECT_LT(stats.ip_var(), 0.5 * previous_var) << "B=" << bits;
    EXPECT_GT(alignment / n, previous_alignment) << "B=" << bits;
    previous_var = stats.ip_var();
    previous_alignment = alignment / n;
    if (bits > 1) {
      EXPECT_EQ(q.code_bytes(), 16u * bits + 12u);
    }
  }
}
