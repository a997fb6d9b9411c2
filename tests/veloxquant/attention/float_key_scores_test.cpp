// Planar codes scored against f32 folded queries: the SIMD kernel against its scalar reference
// (bit for bit), and the reference against the definition in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/float_key_scores.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(FloatKeyScores, EqualTheReferenceBitForBitAndTheDefinition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  int checked = 0;
  for (int bits : {2, 4, 8}) {
    for (int64_t d : {32, 64, 128}) {
      const int64_t plane = d * bits / 8;
      if (!can_score_codes_f32(bits, plane)) continue;
      const int64_t rows = 39, stride = plane + 5;  // rows need not be back to back
      std::vector<uint8_t> bytes(static_cast<std::size_t>(rows * stride));
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
      for (int64_t nq : {1, 2, 3, 4, 7}) {
        std::vector<float> folded(static_cast<std::size_t>(nq * d)), bias(static_cast<std::size_t>(nq));
        for (float& x : folded) x = value(rng);
        folded[0] = 300.0f;  // one outlier channel, as SmolLM2's keys have
        for (float& x : bias) x = value(rng);
        const int64_t ld = rows + 3;
        std::vector<float> simd(static_cast<std::size_t>(nq * ld), -7.0f), plain = simd;
        score_codes_f32(bytes.data(), stride, rows, plane, bits, folded.data(), bias.data(), nq, simd.data(), ld);
        scalar::score_codes_f32(bytes.data(), stride, rows, plane, bits, folded.data(), bias.data(), nq, plain.data(),
                                ld);
        ASSERT_EQ(simd, plain) << "bits " << bits << " d " << d << " nq " << nq;
        const int planes = 8 / bits;
        for (int64_t r = 0; r < nq; ++r) {
          for (int64_t j = 0; j < rows; ++j) {
            double want = bias[static_cast<std::size_t>(r)];
            for (int k = 0; k < planes; ++k) {
              for (int64_t p = 0; p < plane; ++p) {
                const int code = (bytes[static_cast<std::size_t>(j * stride + p)] >> (k * bits)) & ((1 << bits) - 1);
                want += static_cast<double>(folded[static_cast<std::size_t>(r * d + k * plane + p)]) * code;
              }
            }
            ASSERT_NEAR(plain[static_cast<std::size_t>(r * ld + j)], want, 2e-6 * 300.0 * (1 << bits) * d)
                << "bits " << bits << " d " << d;
          }
          for (int64_t j = rows; j < ld; ++j) ASSERT_EQ(plain[static_cast<std::size_t>(r * ld + j)], -7.0f);
        }
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 35);
  EXPECT_FALSE(can_score_codes_f32(3, 24));
  EXPECT_FALSE(can_score_codes_f32(4, 4));  // not a whole 8-byte chunk
}

}  // namespace
}  // namespace veloxquant::attention::kernels
