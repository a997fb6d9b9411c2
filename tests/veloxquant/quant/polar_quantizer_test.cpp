// PolarQuant: the paper's 3.875 bits per coordinate at (4,2,2,2) bits, reconstruction that
// improves with bits, and the polar transform itself (exact angles reproduce the vector).
#include <gtest/gtest.h>

#include <cmath>

#include "veloxquant/errors.h"
#include "veloxquant/quant/polar.h"
#include "veloxquant/quant/quant_eval.h"

namespace vq = veloxquant::quant;

TEST(Polar, PaperBitBudget) {
  vq::Polar q(128, 2, 1);
  EXPECT_EQ(q.level_bits(1), 4);
  EXPECT_EQ(q.level_bits(2), 2);
  EXPECT_EQ(q.level_bits(4), 2);
  EXPECT_EQ(q.code_bytes(), 62u);  // 46 bytes of angles + 8 bf16 radii
  EXPECT_DOUBLE_EQ(q.code_bytes() * 8.0 / 128, 3.875);
}

TEST(Polar, ErrorFallsWithBitsAndScoreMatchesDecode) {
  double previous = 1.0;
  for (int bits = 1; bits <= 5; ++bits) {
    const auto r = vq::evaluate_quantizer("polar", bits, 128, 800, 6);
    EXPECT_LT(r.mse, previous) << "b=" << bits;
    previous = r.mse;
  }
  EXPECT_LT(previous, 0.01);
  vq::Polar q(64, 3, 2);
  const auto pairs = vq::draw_unit_pairs(64, 30, 4);
  std::vector<uint8_t> codes(30 * q.code_bytes());
  q.encode(pairs.x.data(), 30, codes.data());
  std::vector<float> dec(std::size_t{30} * 64);
  q.decode(codes.data(), 30, dec.data());
  for (int i = 0; i < 30; ++i) {
    float s;
    q.score(q.prepare_query(&pairs.y[static_cast<std::size_t>(i) * 64]), &codes[i * q.code_bytes()], 1, &s);
    double dot = 0;
    for (int j = 0; j < 64; ++j) dot += static_cast<double>(pairs.y[i * 64 + j]) * dec[i * 64 + j];
    EXPECT_NEAR(s, dot, 2e-5);
  }
}

TEST(Polar, RadiiPreserveBlockNorms) {
  // Every angle codebook keeps cos^2 + sin^2 = 1, so each 16-block of the rotated decode has
  // exactly the stored radius: the decoded vector's norm equals the input's up to bf16.
  vq::Polar q(128, 2, 5);
  const auto pairs = vq::draw_unit_pairs(128, 10, 9);
  std::vector<uint8_t> codes(10 * q.code_bytes());
  q.encode(pairs.x.data(), 10, codes.data());
  std::vector<float> dec(std::size_t{10} * 128);
  q.decode(codes.data(), 10, dec.data());
  for (int i = 0; i < 10; ++i) {
    double sq = 0;
    for (int j = 0; j < 128; ++j) sq += static_cast<double>(dec[i * 128 + j]) * dec[i * 128 + j];
    EXPECT_NEAR(std::sqrt(sq), 1.0, 4e-3);
  }
}

TEST(Polar, DimensionMustBeDivisibleBySixteen) {
  try {
    const vq::Polar polar(100, 2, 1);
    FAIL();
  } catch (const veloxquant::QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
  }
  EXPECT_THROW(vq::Polar(128, 7, 1), veloxquant::QuantizerConfigError);
}
