// The multi-query attention tile kernels against their scalar references: the same sums,
// reassociated, for every row count around the SIMD pass width (whole passes of 4 or 8 rows
// plus a remainder), dimensions that are not a multiple of the vector width, query counts
// around the blocks of four, and strides wider than a row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/random_values.h"

#include "base/half.h"
#include "lm/kernels/attention_tiles.h"

namespace lm::kernels::tiles {
namespace {

std::vector<float> random_values(std::size_t n, uint32_t seed) { return test_support::normal_values(n, seed); }

// One case of ScoreRowsMatchesScalar: d columns, nq queries, `rows` rows.
void check_score_rows(int64_t d, int64_t nq, int64_t rows) {
  const int64_t ld = 70, row_stride = d + 3, q_stride = d + 1;
  const auto q = random_values(static_cast<std::size_t>(nq * q_stride), 1);
  const auto k = random_values(static_cast<std::size_t>(rows * row_stride), 2);
  std::vector<float> s(static_cast<std::size_t>(nq * ld), -7.0f), s_ref = s;
  score_rows(q.data(), q_stride, nq, k.data(), row_stride, rows, d, s.data(), ld);
  scalar::score_rows(q.data(), q_stride, nq, k.data(), row_stride, rows, d, s_ref.data(), ld);
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t j = 0; j < ld; ++j) {
      // Scores past n_rows stay untouched.
      ASSERT_NEAR(s[r * ld + j], s_ref[r * ld + j], 1e-4f * std::sqrt(float(d)))
          << "d " << d << " nq " << nq << " rows " << rows << " r " << r << " j " << j;
    }
  }
}

TEST(AttentionTiles, ScoreRowsMatchesScalar) {
  for (int64_t d : {1, 3, 7, 8, 64, 65, 100, 128}) {
    for (int64_t nq : {1, 2, 3, 4, 5, 9}) {
      for (int64_t rows : {1, 3, 4, 7, 8, 9, 16, 37, 64}) ASSERT_NO_FATAL_FAILURE(check_score_rows(d, nq, rows));
    }
  }
}

// A row whose score is known exactly: a pass that swapped two rows' sums would fail this where
// random data could hide it behind the tolerance.
TEST(AttentionTiles, ScoreRowsPutsEachRowsSumInItsOwnSlot) {
  const int64_t d = 64, rows = 19;
  std::vector<float> q(static_cast<std::size_t>(d), 1.0f), k(static_cast<std::size_t>(rows * d));
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t e = 0; e < d; ++e)
      k[static_cast<std::size_t>(j * d + e)] = static_cast<float>(j) + (e == 5 ? 0.5f : 0.0f);
  }
  std::vector<float> s(rows);
  score_rows(q.data(), d, 1, k.data(), d, rows, d, s.data(), rows);
  for (int64_t j = 0; j < rows; ++j) EXPECT_EQ(s[static_cast<std::size_t>(j)], 64.0f * static_cast<float>(j) + 0.5f);
}

// One case of ScoreRowsF16EqualsScoreRowsOnWidenedRows: d columns, nq queries, `rows` rows.
void check_score_rows_f16(int64_t d, int64_t nq, int64_t rows) {
  const int64_t ld = 70, row_stride = d + 5, q_stride = d + 1;
  const auto q = random_values(static_cast<std::size_t>(nq * q_stride), 1);
  const auto values = random_values(static_cast<std::size_t>(rows * row_stride), 2);
  std::vector<uint16_t> k(values.size());
  std::vector<float> widened(values.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = base::f32_to_f16(values[i]);
    widened[i] = base::f16_to_f32(k[i]);
  }
  std::vector<float> s(static_cast<std::size_t>(nq * ld), -7.0f), s_f32 = s, s_ref = s, s_prefetch = s;
  score_rows_f16(q.data(), q_stride, nq, k.data(), row_stride, rows, d, s.data(), ld);
  // Hints ahead of the rows (past the last one too) change nothing.
  score_rows_f16(q.data(), q_stride, nq, k.data(), row_stride, rows, d, s_prefetch.data(), ld, 5);
  ASSERT_EQ(s_prefetch, s) << "d " << d << " nq " << nq << " rows " << rows;
  score_rows(q.data(), q_stride, nq, widened.data(), row_stride, rows, d, s_f32.data(), ld);
  scalar::score_rows_f16(q.data(), q_stride, nq, k.data(), row_stride, rows, d, s_ref.data(), ld);
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t j = 0; j < ld; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * ld + j);
      // Scores past n_rows stay untouched.
      ASSERT_EQ(s[i], s_f32[i]) << "d " << d << " nq " << nq << " rows " << rows << " r " << r << " j " << j;
      ASSERT_NEAR(s[i], s_ref[i], 1e-4f * std::sqrt(float(d)))
          << "d " << d << " nq " << nq << " rows " << rows << " r " << r << " j " << j;
    }
  }
}

// The f16 scorer against score_rows over the same rows widened to f32: equal bit for bit (the
// host's attention swaps one for the other, and its other paths must keep agreeing with it),
// and near the scalar reference. Row counts around the 8-row pass, query counts around the
// groups of three, head dimensions with and without a compile-time kernel and a remainder.
TEST(AttentionTiles, ScoreRowsF16EqualsScoreRowsOnWidenedRows) {
  for (int64_t d : {1, 3, 8, 24, 64, 65, 100, 128}) {
    for (int64_t nq : {1, 2, 3, 4, 5, 6, 9}) {
      for (int64_t rows : {1, 3, 7, 8, 9, 16, 37, 64}) ASSERT_NO_FATAL_FAILURE(check_score_rows_f16(d, nq, rows));
    }
  }
}

// Each (query, row) sum lands in its own slot: rows j score 64 j + 0.5 (+ r for query r), exact
// in f16 and f32, so a pass that swapped rows or queries fails where random data could hide it.
TEST(AttentionTiles, ScoreRowsF16PutsEachSumInItsOwnSlot) {
  const int64_t d = 64, rows = 21, nq = 3;
  std::vector<float> q(static_cast<std::size_t>(nq * d), 1.0f);
  for (int64_t r = 0; r < nq; ++r) q[static_cast<std::size_t>(r * d + 9)] = 1.0f + static_cast<float>(r);
  std::vector<uint16_t> k(static_cast<std::size_t>(rows * d));
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t e = 0; e < d; ++e) {
      k[static_cast<std::size_t>(j * d + e)] =
          base::f32_to_f16(static_cast<float>(j) + (e == 5 ? 0.5f : 0.0f) + (e == 9 ? 1.0f : 0.0f));
    }
  }
  std::vector<float> s(static_cast<std::size_t>(nq * rows));
  score_rows_f16(q.data(), d, nq, k.data(), d, rows, d, s.data(), rows);
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t j = 0; j < rows; ++j) {
      // Row j: 64 j from the ones, 0.5 at e = 5, 1 at e = 9 weighted 1 + r (and j at e = 9 weighted r more).
      const float expected = 64.0f * static_cast<float>(j) + 0.5f + (1.0f + static_cast<float>(r)) +
                             static_cast<float>(r) * static_cast<float>(j);
      EXPECT_EQ(s[static_cast<std::size_t>(r * rows + j)], expected) << "r " << r << " j " << j;
    }
  }
}

TEST(AttentionTiles, AccumulateRowsMatchesScalar) {
  for (int64_t d : {1, 7, 8, 16, 64, 100, 128}) {
    for (int64_t nq : {1, 2, 3, 4, 5, 9, 24}) {
      const int64_t rows = 37, ld = 64;
      const auto k = random_values(static_cast<std::size_t>(rows * (d + 3)), 2);
      const auto w = random_values(static_cast<std::size_t>(nq * ld), 3);
      std::vector<float> acc = random_values(static_cast<std::size_t>(nq * (d + 1)), 4), acc_ref = acc;
      accumulate_rows(w.data(), ld, nq, k.data(), d + 3, rows, d, acc.data(), d + 1);
      scalar::accumulate_rows(w.data(), ld, nq, k.data(), d + 3, rows, d, acc_ref.data(), d + 1);
      for (std::size_t i = 0; i < acc.size(); ++i) ASSERT_NEAR(acc[i], acc_ref[i], 1e-3f) << "d " << d << " nq " << nq;
    }
  }
}

TEST(AttentionTiles, AccumulateRowsF16MatchesScalar) {
  for (int64_t d : {1, 7, 8, 16, 24, 64, 100, 128}) {
    for (int64_t nq : {1, 2, 3, 4, 9}) {
      const int64_t rows = 37, ld = 64, row_stride = d + 5;
      const auto values = random_values(static_cast<std::size_t>(rows * row_stride), 2);
      std::vector<uint16_t> k(values.size());
      for (std::size_t i = 0; i < k.size(); ++i) k[i] = base::f32_to_f16(values[i]);
      const auto w = random_values(static_cast<std::size_t>(nq * ld), 3);
      std::vector<float> acc = random_values(static_cast<std::size_t>(nq * (d + 1)), 4), acc_ref = acc,
                         acc_prefetch = acc;
      accumulate_rows_f16(w.data(), ld, nq, k.data(), row_stride, rows, d, acc.data(), d + 1);
      accumulate_rows_f16(w.data(), ld, nq, k.data(), row_stride, rows, d, acc_prefetch.data(), d + 1, 9);
      ASSERT_EQ(acc_prefetch, acc) << "d " << d << " nq " << nq;
      scalar::accumulate_rows_f16(w.data(), ld, nq, k.data(), row_stride, rows, d, acc_ref.data(), d + 1);
      for (std::size_t i = 0; i < acc.size(); ++i) ASSERT_NEAR(acc[i], acc_ref[i], 1e-3f) << "d " << d << " nq " << nq;
    }
  }
}

TEST(AttentionTiles, ScaleAndMaxMatchesScalar) {
  for (int64_t n : {0, 1, 7, 8, 64, 61}) {
    auto a = random_values(static_cast<std::size_t>(n), 9), b = a;
    EXPECT_EQ(scale_and_max(a.data(), n, 0.125f), scalar::scale_and_max(b.data(), n, 0.125f));
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(scale_and_max(nullptr, 0, 2.0f), -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace lm::kernels::tiles
