// TurboQuant MSE at d = 128 on random unit vectors: distortion within +-3% of the paper's
// table and inner products shrunk by (1 - D_mse(b)) (anchors §1.1, §1.5 items 2-3).
#include <gtest/gtest.h>

#include <cmath>

#include "veloxquant/quant/quant_eval.h"
#include "veloxquant/quant/turboquant_mse.h"

namespace vq = veloxquant::quant;

TEST(TurboQuantMse, DistortionAndShrinkMatchThePaperAtD128) {
  // Paper / anchors values for b = 1..4 (MSE of a unit vector) and the Monte Carlo column.
  const double paper_mse[] = {0.361, 0.116, 0.034, 0.0093};
  for (int bits = 1; bits <= 4; ++bits) {
    const auto r = vq::evaluate_quantizer("turboquant_mse", bits, 128, 2000, 1000 + bits);
    EXPECT_NEAR(r.mse, paper_mse[bits - 1], 0.03 * paper_mse[bits - 1]) << "b=" << bits;
    // Between the lower bound 4^-b and the upper bound (sqrt(3) pi / 2) 4^-b (Theorems 1, 3).
    EXPECT_GT(r.mse, std::pow(4.0, -bits));
    EXPECT_LT(r.mse, std::sqrt(3.0) * M_PI / 2 * std::pow(4.0, -bits));
    // E<y, x_hat> = (1 - D_mse) <y, x>: 0.637, 0.883, 0.965, 0.990 (anchors §1.5 item 3).
    EXPECT_NEAR(r.shrink, 1.0 - paper_mse[bits - 1], 0.01) << "b=" << bits;
    EXPECT_EQ(r.bytes_per_vector, 16u * bits + 2u);
  }
}

TEST(TurboQuantMse, ScoreEqualsInnerProductWithTheDecodedVector) {
  for (int bits : {1, 2, 3, 4, 5, 8}) {
    vq::TurboQuantMse q(128, bits, 7);
    const auto pairs = vq::draw_unit_pairs(128, 50, 3);
    std::vector<uint8_t> codes(50 * q.code_bytes());
    q.encode(pairs.x.data(), 50, codes.data());
    std::vector<float> dec(std::size_t{50} * 128);
    q.decode(codes.data(), 50, dec.data());
    for (int i = 0; i < 50; ++i) {
      const auto prepared = q.prepare_query(&pairs.y[static_cast<std::size_t>(i) * 128]);
      float s;
      q.score(prepared, &codes[i * q.code_bytes()], 1, &s);
      double dot = 0;
      for (int j = 0; j < 128; ++j) dot += static_cast<double>(pairs.y[i * 128 + j]) * dec[i * 128 + j];
      ASSERT_NEAR(s, dot, 2e-5) << "b=" << bits;
    }
  }
}

TEST(TurboQuantMse, SmallDimensionsUseTheBetaCodebookAndStillBeatTheBound) {
  // d = 32 < 64: the exact coordinate density; the MSE must stay under the paper's bound.
  const auto r = vq::evaluate_quantizer("turboquant_mse", 2, 32, 2000, 5);
  EXPECT_LT(r.mse, std::sqrt(3.0) * M_PI / 2 / 16);
  EXPECT_GT(r.mse, 1.0 / 16);
}
