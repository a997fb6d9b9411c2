// TurboQuant prod (MSE at b-1 bits + 1-bit QJL of the residual) is unbiased, with variance
// d * Var = (pi/2) E||r||^2 - E<r,y>^2 (anchors §1.1 and §1.5 item 4). With the MSE
// codebook's centroid condition, <r, x> = ||r||^2 = D on average, so for y = 0.6 x + 0.8 z:
//   E<r,y>^2 = 0.36 D^2 + 0.64 (D - D^2)/(d - 1),   D = D_mse(b - 1) (exact-Beta column).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "veloxquant/core/distortion_stats.h"
#include "veloxquant/quant/quant_eval.h"
#include "veloxquant/quant/turboquant_prod.h"

namespace vq = veloxquant::quant;

namespace {
// Pools several sketch seeds: Theorem 2's expectation is over S as well as over x.
veloxquant::core::DistortionStats pooled_errors(int bits, int seeds, std::size_t per_seed) {
  veloxquant::core::DistortionStats stats;
  for (int s = 0; s < seeds; ++s) {
    vq::TurboQuantProd q(128, bits, 500 + s);
    const auto pairs = vq::draw_unit_pairs(128, per_seed, 900 + s);
    std::vector<uint8_t> codes(per_seed * q.code_bytes());
    q.encode(pairs.x.data(), per_seed, codes.data());
    for (std::size_t i = 0; i < per_seed; ++i) {
      const auto prepared = q.prepare_query(&pairs.y[i * 128]);
      float est;
      q.score(prepared, &codes[i * q.code_bytes()], 1, &est);
      stats.add_inner_product(est, 0.6);
    }
  }
  return stats;
}
}  // namespace

TEST(TurboQuantProd, UnbiasedWithTheoreticalVarianceAtD128) {
  const double d = 128;
  const double exact_beta_mse[] = {0.3609, 0.1160, 0.0340};  // D_mse(1..3), anchors §1.1
  for (int bits = 2; bits <= 4; ++bits) {
    const auto stats = pooled_errors(bits, 8, 500);
    EXPECT_LT(std::abs(stats.ip_bias()), 3 * stats.ip_bias_se()) << "b=" << bits;
    const double D = exact_beta_mse[bits - 2];
    const double theory = std::numbers::pi / 2 * D - 0.36 * D * D - 0.64 * (D - D * D) / (d - 1);
    EXPECT_NEAR(d * stats.ip_mse(), theory, 0.10 * theory) << "b=" << bits;
  }
}

TEST(TurboQuantProd, OneBitUsesOneBitMseStageAsTheOriginal) {
  vq::TurboQuantProd q(128, 1, 1);
  EXPECT_EQ(q.mse_bits(), 1);  // b_mse = max(b - 1, 1)
  EXPECT_EQ(q.code_bytes(), 16u + 16u + 4u);
  vq::TurboQuantProd q3(128, 3, 1);
  EXPECT_EQ(q3.mse_bits(), 2);
  EXPECT_EQ(q3.code_bytes(), 32u + 16u + 4u);
}

TEST(TurboQuantProd, BeatsMseOnlyBiasAtEqualBits) {
  // The MSE-only quantizer shrinks <y,x> by D_mse; prod at the same total bits is unbiased.
  const auto prod = vq::evaluate_quantizer("turboquant_prod", 3, 128, 1500, 4);
  const auto mse = vq::evaluate_quantizer("turboquant_mse", 3, 128, 1500, 4);
  EXPECT_LT(std::abs(prod.shrink - 1.0), 0.01);
  EXPECT_GT(std::abs(mse.shrink - 1.0), 0.025);
}
