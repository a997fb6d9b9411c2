// Integer scoring of group-affine keys: the SIMD loops against their scalar references (bit for
// bit), and the integer scores against exact f64 dot products within the error bound the
// query's rounding allows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "support/random_values.h"
#include "support/simd_targets.h"

#include "veloxquant/attention/integer_key_scores.h"

namespace veloxquant::attention::kernels {
namespace {

using test_support::random_bytes;

// Code-order position e' = k * P + p of a row: the k-th b-bit field of byte p.
int code_at(const uint8_t* row, int64_t plane_bytes, int bits, int64_t e) {
  return (row[e % plane_bytes] >> (e / plane_bytes * bits)) & ((1 << bits) - 1);
}

struct Case {
  int bits;
  int64_t d;
};

TEST(IntegerKeyScores, QueryLimitKeepsEveryRowSumInsideInt32) {
  EXPECT_EQ(integer_query_limit(2, 64), 32767);
  EXPECT_EQ(integer_query_limit(4, 128), 32767);
  EXPECT_EQ(integer_query_limit(8, 256), 32767);  // 255 * 256 * 32767 = 2,139,028,480 < 2^31
  EXPECT_EQ(integer_query_limit(8, 512), 16448);  // (2^31 - 1) / (255 * 512)
  for (const Case c : {Case{2, 64}, Case{4, 256}, Case{8, 512}, Case{8, 1024}}) {
    const int64_t worst = int64_t{integer_query_limit(c.bits, c.d)} * ((1 << c.bits) - 1) * c.d;
    EXPECT_LE(worst, std::numeric_limits<int32_t>::max()) << c.bits << " bits, d " << c.d;
  }
}

TEST(IntegerKeyScores, FoldMatchesScalarAndRoundsWithinHalfAStep) {
  for (const int64_t d : {int64_t{64}, int64_t{128}, int64_t{68}}) {
    const int64_t n_q = 5;
    const auto q = test_support::normal_values(static_cast<std::size_t>(n_q * d), 11);
    auto scale = test_support::normal_values(static_cast<std::size_t>(d), 12);
    const auto min = test_support::normal_values(static_cast<std::size_t>(d), 13);
    for (auto& s : scale) s = std::fabs(s) * 0.1f;
    const int32_t limit = integer_query_limit(4, d);
    std::vector<int16_t> q16(static_cast<std::size_t>(n_q * d)), q16_ref(q16.size());
    std::vector<float> step(n_q), step_ref(n_q), bias(n_q), bias_ref(n_q);
    fold_queries_i16(q.data(), n_q, d, scale.data(), min.data(), limit, q16.data(), step.data(), bias.data());
    scalar::fold_queries_i16(q.data(), n_q, d, scale.data(), min.data(), limit, q16_ref.data(), step_ref.data(),
                             bias_ref.data());
    EXPECT_EQ(q16, q16_ref) << "d " << d;
    EXPECT_EQ(step, step_ref) << "d " << d;
    for (int64_t r = 0; r < n_q; ++r) {
      EXPECT_NEAR(bias[r], bias_ref[r], 1e-5f * (1.0f + std::fabs(bias_ref[r])));
      int max_q = 0;
      for (int64_t c = 0; c < d; ++c) {
        const float folded = q[r * d + c] * scale[c];
        const int16_t v = q16[static_cast<std::size_t>(r * d + c)];
        EXPECT_LE(std::fabs(folded - step[r] * v), 0.5001f * step[r]) << "r " << r << " c " << c;
        max_q = std::max(max_q, std::abs(static_cast<int>(v)));
      }
      EXPECT_EQ(max_q, limit) << "the largest folded element maps to the limit";
    }
  }
}

TEST(IntegerKeyScores, AZeroQueryHasStepZeroAndANonFiniteOneANaNStep) {
  const int64_t d = 64;
  std::vector<float> q(2 * d, 0.0f), scale(d, 1.0f), min(d, 0.5f);
  q[d + 7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int16_t> q16(2 * d);
  std::vector<float> step(2), bias(2);
  fold_queries_i16(q.data(), 2, d, scale.data(), min.data(), 32767, q16.data(), step.data(), bias.data());
  EXPECT_EQ(step[0], 0.0f);
  EXPECT_EQ(bias[0], 0.0f);
  EXPECT_TRUE(std::isnan(step[1]));
  // Then every score of that query is NaN, as the f32 path's would be.
  const std::vector<uint8_t> row = random_bytes(32, 3);
  std::vector<float> scores(2);
  score_codes_i16({row.data(), 32, 1, 32, 4}, {q16.data(), step.data(), bias.data(), 2}, scores.data(), 1);
  EXPECT_EQ(scores[0], 0.0f);
  EXPECT_TRUE(std::isnan(scores[1]));
}

// One (rows, queries) case: the dispatched kernel and every target this machine runs (AVX3's
// paired rows for one-chunk planes, its 16-lane sums for wider ones, AVX2's 8-lane loop, ...)
// whose chunk divides the plane equal the scalar reference bit for bit.
void check_scores_on_every_target(const Case& c, int64_t n_rows, int64_t n_q) {
  const int64_t plane = c.d * c.bits / 8;
  const int64_t stride = plane + 12, ld = n_rows + 5;
  const auto bytes = random_bytes(static_cast<std::size_t>(n_rows * stride), 17 + c.bits);
  const auto q = test_support::normal_values(static_cast<std::size_t>(n_q * c.d), 23);
  const auto min = test_support::normal_values(static_cast<std::size_t>(c.d), 29);
  const std::vector<float> scale(static_cast<std::size_t>(c.d), 0.25f);
  std::vector<int16_t> q16(static_cast<std::size_t>(n_q * c.d));
  std::vector<float> step(n_q), bias(n_q);
  scalar::fold_queries_i16(q.data(), n_q, c.d, scale.data(), min.data(), integer_query_limit(c.bits, c.d), q16.data(),
                           step.data(), bias.data());
  std::vector<float> out(static_cast<std::size_t>(n_q * ld), -1.0f), ref(out);
  const PlaneCodeRows rows{bytes.data(), stride, n_rows, plane, c.bits};
  const IntegerQueries queries{q16.data(), step.data(), bias.data(), n_q};
  score_codes_i16(rows, queries, out.data(), ld);
  scalar::score_codes_i16(rows, queries, ref.data(), ld);
  ASSERT_EQ(out, ref) << c.bits << " bits, d " << c.d << ", " << n_rows << " rows, " << n_q << " queries";
  test_support::for_each_simd_target([&](const char* target) {
    if (!can_score_codes_i16(c.bits, plane)) return;  // this target's chunk does not divide the plane
    std::vector<float> on_target(out.size(), -1.0f);
    score_codes_i16(rows, queries, on_target.data(), ld);
    ASSERT_EQ(on_target, ref) << target << ", " << c.bits << " bits, d " << c.d << ", " << n_rows << " rows, " << n_q
                              << " queries";
  });
}

TEST(IntegerKeyScores, ScoresMatchScalarBitForBitAcrossWidthsRowsAndQueries) {
  for (const Case c : {Case{2, 64}, Case{4, 32}, Case{4, 64}, Case{8, 64}, Case{4, 128}, Case{2, 256}, Case{8, 512}}) {
    if (!can_score_codes_i16(c.bits, c.d * c.bits / 8)) continue;  // a narrower SIMD target's chunk
    for (const int64_t n_rows :
         {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{6}, int64_t{7}, int64_t{33}, int64_t{64}}) {
      for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
        check_scores_on_every_target(c, n_rows, n_q);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(IntegerKeyScores, ScoresStayWithinTheQueryRoundingBoundOfExactScores) {
  // |score - exact| <= (step / 2) * sum_e code_e (each rounded query element is off by at most
  // half a step) plus f32 rounding of the final multiply-add.
  for (const Case c : {Case{2, 64}, Case{4, 64}, Case{4, 128}, Case{8, 64}}) {
    const int64_t plane = c.d * c.bits / 8, n_rows = 40, n_q = 3;
    if (!can_score_codes_i16(c.bits, plane)) continue;
    const auto bytes = random_bytes(static_cast<std::size_t>(n_rows * plane), 31);
    const auto q = test_support::normal_values(static_cast<std::size_t>(n_q * c.d), 37);
    auto scale = test_support::normal_values(static_cast<std::size_t>(c.d), 41);
    const auto min = test_support::normal_values(static_cast<std::size_t>(c.d), 43);
    for (auto& s : scale) s = std::fabs(s) / ((1 << c.bits) - 1);
    std::vector<int16_t> q16(static_cast<std::size_t>(n_q * c.d));
    std::vector<float> step(n_q), bias(n_q), scores(static_cast<std::size_t>(n_q * n_rows));
    fold_queries_i16(q.data(), n_q, c.d, scale.data(), min.data(), integer_query_limit(c.bits, c.d), q16.data(),
                     step.data(), bias.data());
    score_codes_i16({bytes.data(), plane, n_rows, plane, c.bits}, {q16.data(), step.data(), bias.data(), n_q},
                    scores.data(), n_rows);
    for (int64_t r = 0; r < n_q; ++r) {
      for (int64_t j = 0; j < n_rows; ++j) {
        double exact = 0.0, code_sum = 0.0, magnitude = 0.0;
        for (int64_t e = 0; e < c.d; ++e) {
          const int code = code_at(bytes.data() + j * plane, plane, c.bits, e);
          const double term = static_cast<double>(q[r * c.d + e]) * (scale[e] * code + min[e]);
          exact += term;
          magnitude += std::fabs(term);
          code_sum += code;
        }
        const double bound = 0.5 * step[r] * code_sum + 1e-6 * magnitude;
        EXPECT_LE(std::fabs(scores[static_cast<std::size_t>(r * n_rows + j)] - exact), bound)
            << c.bits << " bits, d " << c.d << ", query " << r << ", row " << j;
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
