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

// 39 rows of random planar codes, `stride` bytes apart (rows need not be back to back).
struct PlanarRows {
  int bits;
  int64_t d, plane, rows, stride;
  std::vector<uint8_t> bytes;
  // The definition in double: bias + sum over planes k and bytes p of folded[k * plane + p] times
  // the code in bits [k * bits, (k + 1) * bits) of row j's byte p.
  double definition(int64_t j, const float* folded, float bias) const {
    double want = bias;
    for (int k = 0; k < 8 / bits; ++k) {
      for (int64_t p = 0; p < plane; ++p) {
        const int code = (bytes[static_cast<std::size_t>(j * stride + p)] >> (k * bits)) & ((1 << bits) - 1);
        want += static_cast<double>(folded[k * plane + p]) * code;
      }
    }
    return want;
  }
};

// nq random folded queries (one outlier channel, as SmolLM2's keys have) and biases: SIMD equal
// to scalar bit for bit, the scalar scores near the definition, nothing written past the rows.
void check_queries(const PlanarRows& t, int64_t nq, std::mt19937& rng, std::uniform_real_distribution<float>& value) {
  const int64_t d = t.d, rows = t.rows;
  std::vector<float> folded(static_cast<std::size_t>(nq * d)), bias(static_cast<std::size_t>(nq));
  for (float& x : folded) x = value(rng);
  folded[0] = 300.0f;
  for (float& x : bias) x = value(rng);
  const int64_t ld = rows + 3;
  std::vector<float> simd(static_cast<std::size_t>(nq * ld), -7.0f), plain = simd;
  score_codes_f32(t.bytes.data(), t.stride, rows, t.plane, t.bits, folded.data(), bias.data(), nq, simd.data(), ld);
  scalar::score_codes_f32(t.bytes.data(), t.stride, rows, t.plane, t.bits, folded.data(), bias.data(), nq, plain.data(),
                          ld);
  ASSERT_EQ(simd, plain) << "bits " << t.bits << " d " << d << " nq " << nq;
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t j = 0; j < rows; ++j) {
      const double want = t.definition(j, folded.data() + r * d, bias[static_cast<std::size_t>(r)]);
      ASSERT_NEAR(plain[static_cast<std::size_t>(r * ld + j)], want, 2e-6 * 300.0 * (1 << t.bits) * d)
          << "bits " << t.bits << " d " << d;
    }
    for (int64_t j = rows; j < ld; ++j) ASSERT_EQ(plain[static_cast<std::size_t>(r * ld + j)], -7.0f);
  }
}

TEST(FloatKeyScores, EqualTheReferenceBitForBitAndTheDefinition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  int checked = 0;
  for (int bits : {2, 4, 8}) {
    for (int64_t d : {32, 64, 128}) {
      const int64_t plane = d * bits / 8;
      if (!can_score_codes_f32(bits, plane)) continue;
      PlanarRows t{bits, d, plane, 39, plane + 5, {}};
      t.bytes.resize(static_cast<std::size_t>(t.rows * t.stride));
      for (uint8_t& b : t.bytes) b = static_cast<uint8_t>(byte(rng));
      for (int64_t nq : {1, 2, 3, 4, 7}) {
        check_queries(t, nq, rng, value);
        if (HasFatalFailure()) return;
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
