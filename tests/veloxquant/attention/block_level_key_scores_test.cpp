// Block-scaled level keys scored as integers: the SIMD loop against its scalar reference (bit for
// bit), and both against exact f64 scores over the f32 levels and f16 scales within the bound
// the two roundings allow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <vector>

#include "base/half.h"
#include "support/random_values.h"

#include "veloxquant/attention/block_level_key_scores.h"
#include "veloxquant/quant/block_lloyd_quant.h"

namespace veloxquant::attention::kernels {
namespace {

using test_support::random_bytes;

TEST(BlockLevelKeyScores, LimitKeepsEveryLaneSumInsideInt32) {
  // A lane sums block / 8 products of a block (two per multiply-add, one add per 16 codes).
  for (int64_t block : {32, 64, 128, 256}) {
    const int64_t limit = block_integer_limit(block), products = block / 8;
    EXPECT_LE(limit * limit * products, std::numeric_limits<int32_t>::max()) << block;
    EXPECT_GT((limit + 1) * (limit + 1) * products, std::numeric_limits<int32_t>::max()) << block;
  }
  EXPECT_EQ(block_integer_limit(32), 23170);  // four products per lane
}

TEST(BlockLevelKeyScores, LevelsRoundWithinHalfAStepAndReachTheLimit) {
  for (int bits = 1; bits <= 6; ++bits) {
    const std::vector<float>& levels = quant::block_levels(bits);
    const BlockLevels16 l16 = block_levels16(levels.data(), bits, 23170);
    int max_value = 0;
    for (int c = 0; c < (1 << bits); ++c) {
      EXPECT_LE(std::fabs(double(levels[c]) - double(l16.step) * l16.value[c]), 0.502 * l16.step) << bits << " " << c;
      max_value = std::max(max_value, std::abs(static_cast<int>(l16.value[c])));
    }
    EXPECT_EQ(max_value, 23170) << bits;
  }
}

TEST(BlockLevelKeyScores, ShapesTheLoopTakes) {
  EXPECT_TRUE(can_score_block_level_rows(5, 64, 32));
  EXPECT_TRUE(can_score_block_level_rows(3, 128, 32));
  EXPECT_TRUE(can_score_block_level_rows(6, 64, 64));
  EXPECT_TRUE(can_score_block_level_rows(8, 64, 32));   // even levels, computed from the code
  EXPECT_FALSE(can_score_block_level_rows(7, 64, 32));  // neither a table nor whole bytes
  EXPECT_TRUE(can_score_block_level_rows(4, 96, 32));   // three blocks per row
  EXPECT_TRUE(can_score_block_level_rows(4, 256, 32));  // eight blocks per row
  EXPECT_FALSE(can_score_block_level_rows(4, 80, 32));  // a partial block
  EXPECT_FALSE(can_score_block_level_rows(0, 64, 32));
}

TEST(BlockLevelKeyScores, EvenLevelsAreKeptExactly) {
  for (int bits : {7, 8}) {
    const std::vector<float>& levels = quant::block_levels(bits);
    const BlockLevels16 l16 = block_levels16(levels.data(), bits, 23170);
    EXPECT_TRUE(l16.even) << bits;
    EXPECT_EQ(l16.step, std::ldexp(1.0f, -bits));
    for (int c = 0; c < (1 << bits); ++c) EXPECT_EQ(l16.step * l16.value[c], levels[c]) << bits << " " << c;
  }
  EXPECT_FALSE(block_levels16(quant::block_levels(4).data(), 4, 23170).even);
}

// Lloyd levels round to antisymmetric integers, so the SIMD loop looks them up from half a table
// (SymmetricCodeLookup); a table that is not antisymmetric keeps the whole-table lookup. Both
// give the reference's scores.
TEST(BlockLevelKeyScores, SymmetricLevelsTakeTheHalfTableAndMatchTheReference) {
  for (int bits = 2; bits <= 6; ++bits) {
    const std::vector<float>& levels = quant::block_levels(bits);
    const BlockLevels16 l16 = block_levels16(levels.data(), bits, 23170);
    ASSERT_TRUE(l16.symmetric) << bits;
    for (int c = 0; c < (1 << bits); ++c) EXPECT_EQ(l16.value[(1 << bits) - 1 - c], -l16.value[c]) << bits;
    std::vector<float> skewed = levels;
    skewed[0] *= 0.9f;  // no longer antisymmetric
    const BlockLevels16 s16 = block_levels16(skewed.data(), bits, 23170);
    EXPECT_FALSE(s16.symmetric) << bits;
    const int64_t dim = 64, n_rows = 9, stride = dim * bits / 8;
    const auto codes = random_bytes(static_cast<std::size_t>(n_rows * stride), 21);
    std::vector<uint16_t> scales(static_cast<std::size_t>(n_rows * 2));
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = base::f32_to_f16(0.5f + 0.01f * static_cast<float>(i));
    const auto q = test_support::normal_values(static_cast<std::size_t>(3 * dim), 22);
    std::vector<int16_t> q16(q.size());
    std::vector<float> step(3);
    for (int r = 0; r < 3; ++r) quantize_query_i16(q.data() + r * dim, dim, 23170, q16.data() + r * dim, &step[r]);
    const BlockLevelKeys keys{.codes = codes.data(),
                              .code_stride = stride,
                              .scales = scales.data(),
                              .n_rows = n_rows,
                              .dim = dim,
                              .bits = bits,
                              .block = 32};
    for (const BlockLevels16* table : {&l16, &s16}) {
      std::vector<float> out(static_cast<std::size_t>(3 * n_rows)), ref(out);
      score_block_level_rows(keys, *table, q16.data(), step.data(), nullptr, 3, out.data(), n_rows);
      scalar::score_block_level_rows(keys, *table, q16.data(), step.data(), nullptr, 3, ref.data(), n_rows);
      EXPECT_EQ(out, ref) << bits << (table == &l16 ? " symmetric" : " skewed");
    }
  }
}

TEST(BlockLevelKeyScores, QueryRoundsWithinHalfAStepAndNonFiniteGivesNaNStep) {
  const auto q = test_support::normal_values(64, 3);
  std::vector<int16_t> q16(64);
  float step = 0.0f;
  quantize_query_i16(q.data(), 64, 23170, q16.data(), &step);
  for (int e = 0; e < 64; ++e)
    EXPECT_LE(std::fabs(double(q[e]) - double(step) * q16[e]),
              0.502 * step);  // f32 products: ties may round either way
  std::vector<float> zero(64, 0.0f);
  quantize_query_i16(zero.data(), 64, 23170, q16.data(), &step);
  EXPECT_EQ(step, 0.0f);
  auto bad = q;
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  quantize_query_i16(bad.data(), 64, 23170, q16.data(), &step);
  EXPECT_TRUE(std::isnan(step));
}

struct Shape {
  int bits;
  int64_t dim, block;
  bool uniform = false;  // evenly spaced levels, query rounded to the uniform limit: no table
};

// n_rows rows of random codes, as tightly packed as the cache stores them (the last row ends the
// buffer), and their f16 block scales (0.1 + |normal|): codes from `seed`, scales from seed + 1.
struct RandomKeyRows {
  Shape s;
  int64_t n_rows, stride, nb;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;

  RandomKeyRows(const Shape& shape, int64_t rows, uint32_t seed)
      : s(shape), n_rows(rows), stride((shape.dim * shape.bits + 7) / 8), nb(shape.dim / shape.block) {
    codes = random_bytes(static_cast<std::size_t>(n_rows * stride), seed);
    scales.resize(static_cast<std::size_t>(n_rows * nb));
    const auto scale_values = test_support::normal_values(scales.size(), seed + 1);
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = base::f32_to_f16(0.1f + std::fabs(scale_values[i]));
  }
  BlockLevelKeys keys() const {
    return BlockLevelKeys{.codes = codes.data(),
                          .code_stride = stride,
                          .scales = scales.data(),
                          .n_rows = n_rows,
                          .dim = s.dim,
                          .bits = s.bits,
                          .block = s.block};
  }
  // Element e's code of row j, read bit by bit (the elements' bits are packed LSB first).
  int code(int64_t j, int64_t e) const {
    int c = 0;
    for (int k = 0; k < s.bits; ++k) {
      const int64_t at = e * s.bits + k;
      c |= ((codes[static_cast<std::size_t>(j * stride + at / 8)] >> (at % 8)) & 1) << k;
    }
    return c;
  }
  double scale(int64_t j, int64_t e) const {
    return base::f16_to_f32(scales[static_cast<std::size_t>(j * nb + e / s.block)]);
  }
};

// One (rows, queries, bias) case of the integer scorer: SIMD equal to scalar bit for bit, nothing
// written past the rows, and the scalar scores within the two roundings' bound of exact f64 ones.
void check_integer_scores(const Shape& s, const std::vector<float>& levels, int32_t limit, int64_t n_rows, int64_t n_q,
                          bool with_bias) {
  const BlockLevels16 l16 = block_levels16(levels.data(), s.bits, limit);
  const RandomKeyRows rows(s, n_rows, 11);
  const int64_t ld = n_rows + 2;
  const auto q = test_support::normal_values(static_cast<std::size_t>(n_q * s.dim), 13);
  std::vector<int16_t> q16(q.size());
  std::vector<float> step(static_cast<std::size_t>(n_q)), bias(static_cast<std::size_t>(n_q));
  for (int64_t r = 0; r < n_q; ++r) {
    quantize_query_i16(q.data() + r * s.dim, s.dim, limit, q16.data() + r * s.dim, &step[r]);
    bias[r] = 0.25f * static_cast<float>(r) - 0.3f;
  }
  const float* b = with_bias ? bias.data() : nullptr;
  std::vector<float> out(static_cast<std::size_t>(n_q * ld), -7.0f), ref(out);
  score_block_level_rows(rows.keys(), l16, q16.data(), step.data(), b, n_q, out.data(), ld);
  scalar::score_block_level_rows(rows.keys(), l16, q16.data(), step.data(), b, n_q, ref.data(), ld);
  ASSERT_EQ(out, ref) << s.bits << " bits, dim " << s.dim << ", block " << s.block << (s.uniform ? " uniform, " : ", ")
                      << n_rows << " rows, " << n_q << " queries";
  for (int64_t r = 0; r < n_q; ++r) {
    EXPECT_EQ(ref[static_cast<std::size_t>(r * ld + n_rows)], -7.0f);  // nothing written past the rows
    for (int64_t j = 0; j < n_rows; ++j) {
      double exact = with_bias ? bias[r] : 0.0, bound = 0.0;
      for (int64_t e = 0; e < s.dim; ++e) {
        const double scale = rows.scale(j, e);
        const double level = levels[static_cast<std::size_t>(rows.code(j, e))];
        const double qe = q[static_cast<std::size_t>(r * s.dim + e)];
        exact += qe * scale * level;
        bound += scale * 0.5 * (std::fabs(qe) * l16.step + std::fabs(level) * step[r] + 0.5 * l16.step * step[r]);
      }
      EXPECT_LE(std::fabs(ref[static_cast<std::size_t>(r * ld + j)] - exact), bound + 1e-5 * (1.0 + std::fabs(exact)));
    }
  }
}

TEST(BlockLevelKeyScores, MatchesScalarBitForBitAndExactScoresWithinTheRoundingBound) {
  const Shape shapes[] = {{1, 64, 32},
                          {2, 64, 32},
                          {3, 64, 32},
                          {4, 64, 64},
                          {5, 64, 32},
                          {6, 64, 32},
                          {3, 128, 32},
                          {5, 128, 64},
                          {4, 128, 128},
                          {6, 256, 64},
                          {4, 96, 32},
                          {2, 256, 256},
                          {8, 64, 32},
                          {8, 128, 64},
                          // Evenly spaced levels scored from the codes themselves (8 bits above
                          // takes the table path: its query uses the larger limit).
                          {1, 64, 32, true},
                          {2, 64, 32, true},
                          {3, 64, 32, true},
                          {4, 64, 32, true},
                          {5, 64, 32, true},
                          {6, 64, 32, true},
                          {4, 128, 64, true},
                          {3, 96, 32, true},
                          {5, 256, 256, true},
                          {8, 64, 32, true},
                          {8, 128, 128, true}};
  for (const Shape& s : shapes) {
    ASSERT_TRUE(can_score_block_level_rows(s.bits, s.dim, s.block)) << s.bits << " " << s.dim << " " << s.block;
    const std::vector<float>& levels = quant::block_levels(
        s.bits, static_cast<int>(s.block),
        s.uniform ? quant::BlockLloydQuantizer::Levels::kUniform : quant::BlockLloydQuantizer::Levels::kLloyd);
    const int32_t limit =
        s.uniform ? std::min(block_integer_limit(s.block), kUniformQueryLimit) : block_integer_limit(s.block);
    for (const int64_t n_rows : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{64}}) {
      for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
        for (const bool with_bias : {false, true}) {
          check_integer_scores(s, levels, limit, n_rows, n_q, with_bias);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// One (rows, queries, bias) case of the f32 permuted-level scorer: SIMD equal to scalar bit for
// bit, nothing written past the rows, and the scalar scores near f64 ones over the same levels.
void check_permuted_scores(const Shape& s, const std::vector<float>& levels, int64_t n_rows, int64_t n_q,
                           bool with_bias) {
  const RandomKeyRows rows(s, n_rows, 31);
  const int64_t ld = n_rows + 2, q_stride = s.dim + 5;
  const auto q = test_support::normal_values(static_cast<std::size_t>(n_q * q_stride), 33);
  std::vector<float> bias(static_cast<std::size_t>(n_q));
  for (int64_t r = 0; r < n_q; ++r) bias[r] = 0.25f * static_cast<float>(r) - 0.3f;
  const float* b = with_bias ? bias.data() : nullptr;
  std::vector<float> out(static_cast<std::size_t>(n_q * ld), -7.0f), ref(out);
  score_permuted_level_rows(rows.keys(), levels.data(), q.data(), q_stride, b, n_q, out.data(), ld);
  scalar::score_permuted_level_rows(rows.keys(), levels.data(), q.data(), q_stride, b, n_q, ref.data(), ld);
  ASSERT_EQ(out, ref) << s.bits << " bits, dim " << s.dim << ", block " << s.block << ", " << n_rows << " rows, " << n_q
                      << " queries";
  // The f32 sums' rounding grows with the FMA chain: dim / 8 groups per lane, plus the reduction.
  const int64_t chain = s.dim / 8 + 4;
  for (int64_t r = 0; r < n_q; ++r) {
    EXPECT_EQ(ref[static_cast<std::size_t>(r * ld + n_rows)], -7.0f);  // nothing written past the rows
    for (int64_t j = 0; j < n_rows; ++j) {
      double exact = with_bias ? bias[r] : 0.0, magnitude = std::fabs(exact);
      for (int64_t e = 0; e < s.dim; ++e) {
        const double term = double(q[static_cast<std::size_t>(r * q_stride + e)]) * rows.scale(j, e) *
                            levels[static_cast<std::size_t>(rows.code(j, e))];
        exact += term;
        magnitude += std::fabs(term);
      }
      EXPECT_NEAR(ref[static_cast<std::size_t>(r * ld + j)], exact, 1e-6 * magnitude * static_cast<double>(chain));
    }
  }
}

// 1-3-bit keys on Lloyd levels scored in f32 from a level register: the SIMD loop against its
// scalar reference bit for bit, and against f64 scores over the same levels and scales.
TEST(BlockLevelKeyScores, PermutedLevelsMatchScalarBitForBitAndF64Scores) {
  EXPECT_TRUE(can_score_permuted_level_rows(3, 64, 32));
  EXPECT_TRUE(can_score_permuted_level_rows(1, 40, 8));
  EXPECT_FALSE(can_score_permuted_level_rows(4, 64, 32));  // 16 levels: the integer loop
  EXPECT_FALSE(can_score_permuted_level_rows(3, 64, 12));  // a block of partial groups
  const Shape shapes[] = {{3, 64, 32}, {3, 128, 32}, {2, 64, 32},   {1, 64, 32},
                          {3, 64, 64}, {3, 96, 32},  {2, 256, 128}, {3, 40, 8}};
  for (const Shape& s : shapes) {
    ASSERT_TRUE(can_score_permuted_level_rows(s.bits, s.dim, s.block)) << s.bits << " " << s.dim << " " << s.block;
    // Any levels work; blocks below 32 (no solved levels) borrow those of 32.
    const std::vector<float>& levels = quant::block_levels(s.bits, static_cast<int>(std::max<int64_t>(s.block, 32)));
    for (const int64_t n_rows : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{64}}) {
      for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
        for (const bool with_bias : {false, true}) {
          check_permuted_scores(s, levels, n_rows, n_q, with_bias);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
