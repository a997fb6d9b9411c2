// Codebook keys scored as integers: the SIMD loop against its scalar reference (bit for bit),
// and against exact f64 scores over the codebook values within the rounding bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "support/random_values.h"

#include "veloxquant/attention/codebook_key_scores.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

using test_support::random_bytes;

// Lloyd-Max-like 4-level codebooks (the stages of a 2-bit RVQ).
const float kStage1[4] = {-1.51f, -0.4528f, 0.4528f, 1.51f};
const float kStage2[4] = {-0.31f, -0.09f, 0.1f, 0.29f};

TEST(CodebookKeyScores, LimitKeepsEveryRowSumInsideInt32) {
  for (int64_t d : {64, 128, 256}) {
    const int64_t limit = codebook_integer_limit(d);
    EXPECT_LE(limit * limit * d, std::numeric_limits<int32_t>::max()) << d;
    EXPECT_GT((limit + 1) * (limit + 1) * d, std::numeric_limits<int32_t>::max()) << d;
  }
  EXPECT_EQ(codebook_integer_limit(64), 5792);
}

TEST(CodebookKeyScores, LevelsRoundTheSixteenSumsWithinHalfAStep) {
  const CodebookLevels16 levels = codebook_levels16(kStage1, kStage2, 5792);
  int max_value = 0;
  for (int i = 0; i < 16; ++i) {
    const float sum = kStage1[i / 4] + kStage2[i % 4];
    EXPECT_LE(std::fabs(sum - levels.step * levels.value[i]), 0.5001f * levels.step) << i;
    max_value = std::max(max_value, std::abs(static_cast<int>(levels.value[i])));
  }
  EXPECT_EQ(max_value, 5792);
}

TEST(CodebookKeyScores, LookupPositionsArePermutation) {
  for (int64_t d : {64, 128}) {
    std::set<int64_t> seen;
    for (int64_t e = 0; e < d; ++e) seen.insert(codebook_lookup_position(e, d));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), d);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), d - 1);
  }
}

// One shape's inputs: n_rows rows of two random code streams (3 bytes of slack per row), n_q
// normal queries rounded by quantize_codebook_query, the levels of one or both stages.
struct CodebookCase {
  int64_t d, n_rows, n_q, plane, stride, ld;
  bool two_stages;
  std::vector<uint8_t> s1, s2;
  std::vector<float> q;
  CodebookLevels16 levels;
  std::vector<int16_t> q16;
  std::vector<float> step;

  CodebookCase(int64_t d_, bool two_stages_, int64_t n_rows_, int64_t n_q_)
      : d(d_), n_rows(n_rows_), n_q(n_q_), plane(d_ / 4), stride(plane + 3), ld(n_rows_ + 2), two_stages(two_stages_) {
    s1 = random_bytes(static_cast<std::size_t>(n_rows * stride), 5);
    s2 = random_bytes(s1.size(), 6);
    q = test_support::normal_values(static_cast<std::size_t>(n_q * d), 7);
    const int32_t limit = codebook_integer_limit(d);
    levels = codebook_levels16(kStage1, two_stages ? kStage2 : nullptr, limit);
    q16.resize(static_cast<std::size_t>(n_q * d));
    step.resize(static_cast<std::size_t>(n_q));
    quantize_queries();
  }
  // The queries in the layout of the target dispatched now (it follows the vector width).
  void quantize_queries() {
    const int32_t limit = codebook_integer_limit(d);
    for (int64_t r = 0; r < n_q; ++r) quantize_codebook_query(q.data() + r * d, d, limit, q16.data() + r * d, &step[r]);
  }
  CodebookRows rows() const { return {s1.data(), two_stages ? s2.data() : nullptr, stride, n_rows, d}; }
  CodebookQueries queries() const { return {q16.data(), step.data(), n_q}; }

  // Exact: sum_e q[e] * (c1[i1] + c2[i2]). Each term is off by at most |q| * level_step / 2
  // + |level| * q_step / 2 (+ their product).
  void expect_within_rounding_bound(const std::vector<float>& scores) const {
    for (int64_t r = 0; r < n_q; ++r) {
      for (int64_t j = 0; j < n_rows; ++j) {
        double exact = 0.0, bound = 0.0;
        for (int64_t e = 0; e < d; ++e) {
          const int k = static_cast<int>(e / plane);
          const int i1 = (s1[static_cast<std::size_t>(j * stride + e % plane)] >> (2 * k)) & 3;
          const int i2 = (s2[static_cast<std::size_t>(j * stride + e % plane)] >> (2 * k)) & 3;
          const double level = kStage1[i1] + (two_stages ? kStage2[i2] : 0.0f);
          const double qe = q[static_cast<std::size_t>(r * d + e)];
          exact += qe * level;
          bound += 0.5 * (std::fabs(qe) * levels.step + std::fabs(level) * step[r] + 0.5 * levels.step * step[r]);
        }
        EXPECT_LE(std::fabs(scores[static_cast<std::size_t>(r * ld + j)] - exact), bound + 1e-5 * std::fabs(exact));
      }
    }
  }
};

// Every compiled target (the query layout follows the target's vector width: one, two or four
// planes per vector), each against the scalar reference under the same layout, bit for bit;
// `ref` keeps the last target's reference scores.
void expect_every_target_matches_scalar(CodebookCase& c, std::vector<float>& ref) {
  std::vector<float> out(ref.size(), -1.0f);
  test_support::for_each_simd_target([&](const char* target) {
    c.quantize_queries();
    score_codebook_rows(c.rows(), c.levels, c.queries(), out.data(), c.ld);
    scalar::score_codebook_rows(c.rows(), c.levels, c.queries(), ref.data(), c.ld);
    ASSERT_EQ(out, ref) << target << " d " << c.d << (c.two_stages ? " two" : " one") << " stages, " << c.n_rows
                        << " rows, " << c.n_q << " queries";
  });
}

TEST(CodebookKeyScores, MatchesScalarBitForBitAndExactScoresWithinTheRoundingBound) {
  for (const int64_t d : {int64_t{64}, int64_t{128}}) {
    ASSERT_TRUE(can_score_codebook_rows(d));
    for (const bool two_stages : {true, false}) {
      for (const int64_t n_rows : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{64}}) {
        for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{5}}) {
          CodebookCase c(d, two_stages, n_rows, n_q);
          std::vector<float> ref(static_cast<std::size_t>(n_q * c.ld), -1.0f);
          expect_every_target_matches_scalar(c, ref);
          c.expect_within_rounding_bound(ref);
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
