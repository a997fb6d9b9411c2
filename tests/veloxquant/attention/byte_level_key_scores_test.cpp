// Block-scaled level keys scored as 8-bit integers: the SIMD loop against its scalar reference
// (bit for bit), and both against exact f64 scores over the f32 levels, the f32 query and the f16
// scales within the bound the two 8-bit roundings allow.
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL, which the kernels compile
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/half.h"
#include "support/random_values.h"

#include "veloxquant/attention/byte_level_key_scores.h"
#include "veloxquant/quant/block_lloyd_quant.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(ByteLevelKeyScores, ShapesItTakes) {
  // Whether the machine runs the SIMD loop is the dispatcher's; the shape rule is fixed.
  if (!can_score_byte_level_rows(5, 64, 32)) GTEST_SKIP() << "no AVX2 target";
  for (int bits : {2, 3, 4, 5, 6}) EXPECT_TRUE(can_score_byte_level_rows(bits, 64, 32)) << bits;
  EXPECT_FALSE(can_score_byte_level_rows(7, 64, 32));  // a 128-entry table
  EXPECT_FALSE(can_score_byte_level_rows(1, 64, 32));
  EXPECT_FALSE(can_score_byte_level_rows(5, 128, 32));  // two blocks per row only
  EXPECT_FALSE(can_score_byte_level_rows(5, 64, 64));
}

TEST(ByteLevelKeyScores, QueryRoundsWithinHalfAStepAndNonFiniteGivesNaNStep) {
  const auto q = test_support::normal_values(64, 3);
  std::vector<int8_t> q8(64);
  std::vector<uint8_t> a8(64);
  float step = 0.0f;
  quantize_query_i8(q.data(), 64, q8.data(), a8.data(), &step);
  float max_abs = 0.0f;
  for (float v : q) max_abs = std::max(max_abs, std::fabs(v));
  EXPECT_FLOAT_EQ(step, max_abs / 127.0f);
  for (int e = 0; e < 64; ++e) {
    EXPECT_LE(std::fabs(q[e] - step * q8[e]), 0.5f * step * 1.0001f) << e;
    EXPECT_GE(q8[e], -127);
    EXPECT_EQ(a8[e], std::abs(q8[e]));
  }
  std::vector<float> bad(q);
  bad[5] = std::numeric_limits<float>::infinity();
  quantize_query_i8(bad.data(), 64, q8.data(), a8.data(), &step);
  EXPECT_TRUE(std::isnan(step));
  for (int e = 0; e < 64; ++e) EXPECT_EQ(q8[e], 0);
  std::vector<float> zero(64, 0.0f);
  quantize_query_i8(zero.data(), 64, q8.data(), a8.data(), &step);
  EXPECT_EQ(step, 0.0f);
}

// Element e's code of a row (bits per element, packed LSB first), read bit by bit.
int code_at(const uint8_t* row, int bits, int64_t e) {
  int code = 0;
  for (int k = 0; k < bits; ++k) {
    const int64_t at = e * bits + k;
    code |= ((row[at / 8] >> (at % 8)) & 1) << k;
  }
  return code;
}

// One (rows, queries, bias) case on 64-element rows of two 32-element blocks: every SIMD target
// this machine runs and the dispatcher equal to the scalar reference bit for bit, nothing written
// past the rows, and the scores within the two roundings' bound of exact ones.
void check_case(int bits, const std::vector<float>& levels, const ByteLevels& l8, int64_t n_rows, int64_t n_q,
                bool with_bias) {
  const int64_t dim = 64, block = 32, nb = 2;
  // Rows as tightly packed as the cache stores them: the last row ends the buffer.
  const int64_t stride = dim * bits / 8, ld = n_rows + 2;
  const auto codes = test_support::random_bytes(static_cast<std::size_t>(n_rows * stride), 31);
  std::vector<uint16_t> scales(static_cast<std::size_t>(n_rows * nb));
  const auto scale_values = test_support::normal_values(scales.size(), 32);
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = base::f32_to_f16(0.1f + std::fabs(scale_values[i]));
  const auto q = test_support::normal_values(static_cast<std::size_t>(n_q * dim), 33);
  std::vector<int8_t> q8(q.size());
  std::vector<uint8_t> a8(q.size());
  std::vector<float> step(static_cast<std::size_t>(n_q)), bias(static_cast<std::size_t>(n_q));
  for (int64_t r = 0; r < n_q; ++r) {
    quantize_query_i8(q.data() + r * dim, dim, q8.data() + r * dim, a8.data() + r * dim, &step[r]);
    bias[r] = 0.25f * static_cast<float>(r) - 0.3f;
  }
  const BlockLevelKeys keys{.codes = codes.data(),
                            .code_stride = stride,
                            .scales = scales.data(),
                            .n_rows = n_rows,
                            .dim = dim,
                            .bits = bits,
                            .block = block};
  const float* b = with_bias ? bias.data() : nullptr;
  std::vector<float> out(static_cast<std::size_t>(n_q * ld), -7.0f), ref(out);
  scalar::score_byte_level_rows(keys, l8, q8.data(), a8.data(), step.data(), b, n_q, ref.data(), ld);
  // Every SIMD target this machine runs (AVX3_DL's 512-bit loop, the AVX2 loop on AVX3 and
  // AVX2, ...), bit for bit.
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> on_target(out);
    score_byte_level_rows(keys, l8, q8.data(), a8.data(), step.data(), b, n_q, on_target.data(), ld);
    ASSERT_EQ(on_target, ref) << target << ", " << bits << " bits, " << n_rows << " rows, " << n_q << " queries";
  });
  score_byte_level_rows(keys, l8, q8.data(), a8.data(), step.data(), b, n_q, out.data(), ld);
  ASSERT_EQ(out, ref) << bits << " bits, " << n_rows << " rows, " << n_q << " queries";
  for (int64_t r = 0; r < n_q; ++r) {
    EXPECT_EQ(ref[static_cast<std::size_t>(r * ld + n_rows)], -7.0f);  // nothing written past the rows
    for (int64_t j = 0; j < n_rows; ++j) {
      double exact = with_bias ? bias[r] : 0.0, bound = 1e-5;
      for (int64_t e = 0; e < dim; ++e) {
        const int code = code_at(codes.data() + j * stride, bits, e);
        const double scale = base::f16_to_f32(scales[static_cast<std::size_t>(j * nb + e / block)]);
        const double level = levels[static_cast<std::size_t>(code)];
        const double qe = q[static_cast<std::size_t>(r * dim + e)];
        exact += qe * scale * level;
        bound += scale * 0.5 * (std::fabs(qe) * l8.step + std::fabs(level) * step[r] + 0.5 * l8.step * step[r]);
      }
      EXPECT_NEAR(ref[static_cast<std::size_t>(r * ld + j)], exact, bound)
          << bits << " bits, row " << j << ", query " << r;
    }
  }
}

TEST(ByteLevelKeyScores, MatchesScalarReferenceAndExactScores) {
  const int64_t block = 32;
  for (int bits = 2; bits <= 6; ++bits) {
    const std::vector<float>& levels = quant::block_levels(bits, static_cast<int>(block));
    const ByteLevels l8 = byte_levels(levels.data(), bits);
    for (int c = 0; c < (1 << bits); ++c) {
      EXPECT_LE(std::fabs(levels[c] - l8.step * l8.value[c]), 0.5f * l8.step * 1.0001f) << bits << " " << c;
    }
    // 8, 9, 13: whole and partial passes of the 512-bit loop (eight rows a pass).
    for (const int64_t n_rows :
         {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{8}, int64_t{9}, int64_t{13}, int64_t{64}}) {
      for (const int64_t n_q : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}}) {
        for (const bool with_bias : {false, true}) {
          check_case(bits, levels, l8, n_rows, n_q, with_bias);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The largest sums the loop can meet: every query byte +-127 and every code on an outermost
// level (int8 +-127), signs chosen so that all 64 products add (+127 * 127 each, or all -), or
// alternate. vpmaddubsw adds two products into an int16 with saturation: 2 * 127 * 127 = 32258
// stays below 32767, so every block sum is exact (32 * 16129 = 516128) and the SIMD loop, its
// scalar reference and the closed form agree bit for bit. A query byte of 128 (|-128|) would
// saturate: quantize_query_i8 never makes one, nor byte_levels a level of -128.
TEST(ByteLevelKeyScores, ExtremeMagnitudesSumExactlyWithoutSaturation) {
  const int64_t dim = 64, block = 32;
  for (int bits = 2; bits <= 6; ++bits) {
    const ByteLevels l8 = byte_levels(quant::block_levels(bits, static_cast<int>(block)).data(), bits);
    const int top = (1 << bits) - 1;
    ASSERT_EQ(l8.value[0], -127) << bits;
    ASSERT_EQ(l8.value[top], 127) << bits;
    for (int c = 0; c <= top; ++c) EXPECT_GE(l8.value[c], -127) << bits;
    // Rows: all codes top; all codes 0; codes alternating top/0; first block top, second 0.
    const int64_t stride = dim * bits / 8, n_rows = 4;
    std::vector<uint8_t> codes(static_cast<std::size_t>(n_rows * stride), 0);
    const auto code_of = [&](int64_t j, int64_t e) {
      switch (j) {
        case 0:
          return top;
        case 1:
          return 0;
        case 2:
          return e % 2 == 0 ? top : 0;
        default:
          return e < block ? top : 0;
      }
    };
    for (int64_t j = 0; j < n_rows; ++j)
      for (int64_t e = 0; e < dim; ++e)
        for (int k = 0; k < bits; ++k)
          if ((code_of(j, e) >> k) & 1)
            codes[static_cast<std::size_t>(j * stride + (e * bits + k) / 8)] |=
                static_cast<uint8_t>(1u << ((e * bits + k) % 8));
    std::vector<uint16_t> scales(static_cast<std::size_t>(n_rows * 2), base::f32_to_f16(1.0f));
    // Queries: all +127; all -127; alternating +127/-127; -127 then +127 by block.
    const int64_t n_q = 4, ld = n_rows;
    std::vector<int8_t> q8(static_cast<std::size_t>(n_q * dim));
    std::vector<uint8_t> a8(q8.size(), 127);
    for (int64_t r = 0; r < n_q; ++r)
      for (int64_t e = 0; e < dim; ++e) {
        const bool plus = r == 0 || (r == 2 && e % 2 == 0) || (r == 3 && e >= block);
        q8[static_cast<std::size_t>(r * dim + e)] = static_cast<int8_t>(plus ? 127 : -127);
      }
    const std::vector<float> step(static_cast<std::size_t>(n_q), 1.0f);
    const BlockLevelKeys keys{.codes = codes.data(),
                              .code_stride = stride,
                              .scales = scales.data(),
                              .n_rows = n_rows,
                              .dim = dim,
                              .bits = bits,
                              .block = block};
    std::vector<float> out(static_cast<std::size_t>(n_q * ld)), ref(out);
    score_byte_level_rows(keys, l8, q8.data(), a8.data(), step.data(), nullptr, n_q, out.data(), ld);
    scalar::score_byte_level_rows(keys, l8, q8.data(), a8.data(), step.data(), nullptr, n_q, ref.data(), ld);
    ASSERT_EQ(out, ref) << bits << " bits";
    for (int64_t r = 0; r < n_q; ++r) {
      for (int64_t j = 0; j < n_rows; ++j) {
        int64_t block_sum[2] = {0, 0};
        for (int64_t e = 0; e < dim; ++e)
          block_sum[e / block] +=
              int64_t{q8[static_cast<std::size_t>(r * dim + e)]} * (code_of(j, e) == top ? 127 : -127);
        const float want = static_cast<float>(block_sum[0] + block_sum[1]) * l8.step;
        EXPECT_EQ(ref[static_cast<std::size_t>(r * ld + j)], want) << bits << " bits, query " << r << ", row " << j;
      }
    }
    // Query 0 against row 0: every product +16129, the largest total.
    EXPECT_EQ(ref[0], 2.0f * 32 * 127 * 127 * l8.step) << bits;
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
