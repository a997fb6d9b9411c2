// Word-layout key rows scored by word planes (attention/word_plane_scores.h): the padded code
// order is a permutation of the natural channels plus padding; the SIMD kernel equals the scalar
// reference bit for bit (every width, with and without levels, 1-7 queries, ragged row counts,
// rows packed back to back so the last row's masked load ends at the buffer's end); and both
// equal the plain natural-order dot product of the decoded codes within float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "support/random_values.h"

#include "veloxquant/attention/word_plane_scores.h"

namespace veloxquant::attention::kernels {
namespace {

struct Case {
  int bits;
  int64_t codes;
};

const Case kCases[] = {{3, 64}, {3, 128}, {5, 64}, {6, 64}, {7, 64}, {3, 30},
                       {3, 7},  {5, 100}, {2, 64}, {8, 40}, {1, 70}};

TEST(WordPlaneScores, PositionsAreTheInverseOfNatural) {
  for (const Case c : kCases) {
    const WordPlanes p = word_planes(c.bits, c.codes);
    EXPECT_EQ(p.per, 32 / c.bits);
    EXPECT_EQ(p.words, (c.codes + p.per - 1) / p.per);
    EXPECT_EQ(p.dim() % 8, 0);
    int64_t real = 0;
    for (int64_t e = 0; e < p.dim(); ++e) {
      const int64_t i = p.natural(e);
      if (i < 0) continue;
      ++real;
      EXPECT_EQ(p.position(i), e) << c.bits << " bits, " << c.codes << " codes";
    }
    EXPECT_EQ(real, c.codes);
  }
  const WordPlanes three = word_planes(3, 64);  // 7 words, 10 planes of 8 lanes
  EXPECT_EQ(three.dim(), 80);
  EXPECT_EQ(three.natural(0), 0);
  EXPECT_EQ(three.natural(1), 10);   // lane 1 of plane 0: word 1's first code
  EXPECT_EQ(three.natural(8), 1);    // plane 1, lane 0
  EXPECT_EQ(three.natural(7), -1);   // lane 7: no eighth word
  EXPECT_EQ(three.natural(38), -1);  // plane 4 of word 6: past code 63
}

// Word-layout rows of random codes (unused high bits zero, as core/bit_packing.h leaves them).
std::vector<uint32_t> random_rows(const WordPlanes& p, int64_t n_rows, int64_t stride, std::vector<int>& codes,
                                  std::mt19937& rng) {
  std::uniform_int_distribution<int> code(0, (1 << p.bits) - 1);
  std::vector<uint32_t> words(static_cast<std::size_t>(n_rows * stride), 0u);
  codes.assign(static_cast<std::size_t>(n_rows * p.codes), 0);
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int64_t i = 0; i < p.codes; ++i) {
      const int c = code(rng);
      codes[static_cast<std::size_t>(j * p.codes + i)] = c;
      words[static_cast<std::size_t>(j * stride + i / p.per)] |= static_cast<uint32_t>(c) << (p.bits * (i % p.per));
    }
  }
  // Words between rows (stride > words) hold noise the kernel must not read.
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int64_t w = p.words; w < stride; ++w) words[static_cast<std::size_t>(j * stride + w)] = 0xDEADBEEFu;
  }
  return words;
}

// One (levels, row stride, rows, queries) case: SIMD equal to scalar bit for bit, the scores near
// the natural-order dot product in double, the columns past the rows untouched.
void check_case(const Case& c, const WordPlanes& p, const std::vector<float>& table, bool with_levels, int64_t extra,
                int64_t n_rows, int64_t n_q, std::mt19937& rng) {
  const int64_t stride = p.words + extra, ld = n_rows + 3;
  std::vector<int> codes;
  const std::vector<uint32_t> words = random_rows(p, n_rows, stride, codes, rng);
  const std::vector<float> natural =
      test_support::normal_values(static_cast<std::size_t>(n_q * c.codes), static_cast<uint32_t>(rng()));
  std::vector<float> folded(static_cast<std::size_t>(n_q * p.dim()));
  for (int64_t r = 0; r < n_q; ++r) to_word_plane_order(p, natural.data() + r * c.codes, &folded[r * p.dim()]);
  std::vector<float> bias(static_cast<std::size_t>(n_q));
  for (int64_t r = 0; r < n_q; ++r) bias[static_cast<std::size_t>(r)] = 0.25f * static_cast<float>(r) - 0.5f;
  const float* levels = with_levels ? table.data() : nullptr;
  std::vector<float> got(static_cast<std::size_t>(n_q * ld), -7.0f), ref(got);
  score_word_planes(words.data(), stride, n_rows, p, levels, folded.data(), n_q, bias.data(), got.data(), ld);
  scalar::score_word_planes(words.data(), stride, n_rows, p, levels, folded.data(), n_q, bias.data(), ref.data(), ld);
  ASSERT_EQ(got, ref) << c.bits << " bits, " << c.codes << " codes, " << n_rows << " rows, " << n_q
                      << " queries, levels " << with_levels;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      double exact = bias[static_cast<std::size_t>(r)], magnitude = 0.0;
      for (int64_t i = 0; i < c.codes; ++i) {
        const int code = codes[static_cast<std::size_t>(j * c.codes + i)];
        const double value = with_levels ? table[static_cast<std::size_t>(code)] : code;
        const double term = natural[static_cast<std::size_t>(r * c.codes + i)] * value;
        exact += term;
        magnitude += std::fabs(term);
      }
      EXPECT_NEAR(got[static_cast<std::size_t>(r * ld + j)], exact, 1e-5 * (magnitude + 1.0))
          << c.bits << " bits, query " << r << ", row " << j;
    }
    // Columns past the rows are untouched.
    for (int64_t j = n_rows; j < ld; ++j) EXPECT_EQ(got[static_cast<std::size_t>(r * ld + j)], -7.0f);
  }
}

// check_case for 1, 3 and 7 queries.
void check_queries(const Case& c, const WordPlanes& p, const std::vector<float>& table, bool with_levels, int64_t extra,
                   int64_t n_rows, std::mt19937& rng) {
  for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{7}}) {
    check_case(c, p, table, with_levels, extra, n_rows, n_q, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(WordPlaneScores, SimdEqualsScalarBitForBitAndTheNaturalOrderDotProduct) {
  std::mt19937 rng(11);
  for (const Case c : kCases) {
    const WordPlanes p = word_planes(c.bits, c.codes);
    const std::vector<float> table = test_support::normal_values(std::size_t{1} << c.bits, 3);
    for (const bool with_levels : {false, true}) {
      for (const int64_t extra : {int64_t{0}, int64_t{2}}) {
        for (const int64_t n_rows : {int64_t{1}, int64_t{6}, int64_t{37}}) {
          check_queries(c, p, table, with_levels, extra, n_rows, rng);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
