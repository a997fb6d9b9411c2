// The AMX key scores from integer codes (attention/code_key_scores.h): the dispatched kernel
// (AMX where this machine has it) against the scalar reference bit for bit, and the reference
// against the f64 score of the decoded rows (lo + step * code) within the 22-bit fixed point, for
// ranks with and without a last partial chunk of 64 (kvtc's 185-192), a GQA group of 9 queries,
// more queries than one tile's 16, row counts off a multiple of 16, one large query component
// beside small ones, a zero query, a zero-bit column; and the kept query tiles: a second block
// of queries with other values and the same rows must not reuse the first block's tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/code_key_scores.h"

namespace veloxquant::attention::kernels {
namespace {

struct Case {
  int64_t r, stride;
  std::vector<uint8_t> codes;  // padded to whole 16-row blocks
  std::vector<float> step, lo;
};

Case make_case(int64_t r, int64_t n_rows, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Case c;
  c.r = r;
  c.stride = (r + 63) / 64 * 64;
  const int64_t padded = (n_rows + 15) / 16 * 16;
  c.codes.assign(static_cast<std::size_t>(padded * c.stride), 0);
  for (int64_t j = 0; j < padded; ++j) {
    for (int64_t i = 0; i < c.stride; ++i) {
      // Past the rank and past n_rows: anything (the pieces are zero there, the scores unwritten).
      // Component 1 a zero-bit column (code 0); the rest up to 8 bits.
      const bool live = i < r && j < n_rows;
      c.codes[static_cast<std::size_t>(j * c.stride + i)] = !live    ? static_cast<uint8_t>(code(rng))
                                                            : i == 1 ? 0
                                                                     : static_cast<uint8_t>(code(rng) >> (i % 8));
    }
  }
  c.step.resize(static_cast<std::size_t>(r));
  c.lo.resize(static_cast<std::size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    c.step[static_cast<std::size_t>(i)] = std::abs(normal(rng)) * 0.05f / static_cast<float>(1 + i % 7);
    c.lo[static_cast<std::size_t>(i)] = normal(rng);
  }
  return c;
}

// n_q projected queries of r components: query 0 of 17 all zero; query 1 of 9 has one component
// 1000x the others.
std::vector<float> make_queries(int64_t r, int64_t n_q, std::mt19937& rng, std::normal_distribution<float>& normal) {
  std::vector<float> projected(static_cast<std::size_t>(n_q * r));
  for (int64_t q = 0; q < n_q; ++q) {
    for (int64_t i = 0; i < r; ++i) {
      float x = n_q == 17 && q == 0 ? 0.0f : normal(rng);
      if (n_q == 9 && q == 1 && i == r / 2) x *= 1000.0f;
      projected[static_cast<std::size_t>(q * r + i)] = x;
    }
  }
  return projected;
}

// The queries prepared for one call (one serial), `pstride` floats apart.
std::vector<float> prepare_queries(const Case& c, const std::vector<float>& projected, int64_t n_q, int64_t pstride) {
  const uint64_t serial = next_code_key_serial();
  std::vector<float> prepared(static_cast<std::size_t>(n_q * pstride), -7.0f);
  for (int64_t q = 0; q < n_q; ++q) {
    prepare_code_key_query(projected.data() + q * c.r, c.step.data(), c.lo.data(), c.r, c.stride, serial,
                           static_cast<uint32_t>(q), prepared.data() + q * pstride);
  }
  return prepared;
}

// The dispatched kernel's scores equal the reference's (`plain`) bit for bit, twice: the second
// call reuses the kept query tiles.
void check_kernel_equals_reference(const Case& c, const std::vector<float>& prepared, int64_t pstride, int64_t n_q,
                                   int64_t n_rows, const std::vector<float>& plain, int64_t ld) {
  std::vector<float> fast(plain.size(), -1.0f);
  for (int pass = 0; pass < 2; ++pass) {
    score_code_keys(prepared.data(), pstride, n_q, c.codes.data(), c.stride, n_rows, fast.data(), ld);
    ASSERT_EQ(fast, plain) << "r " << c.r << " queries " << n_q << " rows " << n_rows << " pass " << pass
                           << (code_key_scores_fast() ? " (AMX)" : " (scalar)");
  }
}

// The reference's scores against the f64 score of the decoded rows (lo + step * code), within the
// 22-bit fixed point; nothing written past n_rows.
void check_near_decoded_scores(const Case& c, const std::vector<float>& projected, int64_t n_q, int64_t n_rows,
                               const std::vector<float>& plain, int64_t ld) {
  const int64_t r = c.r;
  for (int64_t q = 0; q < n_q; ++q) {
    const float* p = projected.data() + q * r;
    double largest = 0.0;
    for (int64_t i = 0; i < r; ++i) largest = std::max(largest, std::abs(double{p[i]} * c.step[i]));
    for (int64_t j = 0; j < ld; ++j) {
      const float got = plain[static_cast<std::size_t>(q * ld + j)];
      if (j >= n_rows) {
        ASSERT_EQ(got, -1.0f) << "score past n_rows written";
        continue;
      }
      double exact = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < r; ++i) {
        const double v =
            double{c.lo[static_cast<std::size_t>(i)]} +
            double{c.step[static_cast<std::size_t>(i)]} * c.codes[static_cast<std::size_t>(j * c.stride + i)];
        exact += double{p[i]} * v;
        magnitude += std::abs(double{p[i]} * v);
      }
      // Each term within half a unit (largest / 2^22) times its code (<= 255), plus f32
      // rounding of the sums and of the offset.
      const double bound = 0.5 * largest / 4194304.0 * 255.0 * static_cast<double>(r) + 4e-7 * magnitude;
      ASSERT_NEAR(got, exact, bound) << "r " << r << " q " << q << " row " << j;
    }
  }
}

TEST(CodeKeyScores, KernelEqualsScalarReferenceAndApproximatesTheFloatScores) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r : {5, 64, 100, 185, 189, 192, 256}) {
    for (int64_t n_q : {1, 9, 17}) {
      for (int64_t n_rows : {1, 7, 16, 64, 100}) {
        const Case c = make_case(r, n_rows, rng);
        const int64_t pstride = code_key_query_floats(c.stride) + 3, ld = n_rows + 5;
        const std::vector<float> projected = make_queries(r, n_q, rng, normal);
        const std::vector<float> prepared = prepare_queries(c, projected, n_q, pstride);
        std::vector<float> plain(static_cast<std::size_t>(n_q * ld), -1.0f);
        scalar::score_code_keys(prepared.data(), pstride, n_q, c.codes.data(), c.stride, n_rows, plain.data(), ld);
        check_kernel_equals_reference(c, prepared, pstride, n_q, n_rows, plain, ld);
        if (HasFatalFailure()) return;
        check_near_decoded_scores(c, projected, n_q, n_rows, plain, ld);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(CodeKeyScores, KeptQueryTilesFollowTheQueries) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t r = 189, n_q = 9, n_rows = 64;
  const Case c = make_case(r, n_rows, rng);
  const int64_t pstride = code_key_query_floats(c.stride);
  // Two calls' queries in the same buffer, as a decode step after another: the second has other
  // values, so it needs another serial, and its scores must be its own.
  std::vector<float> prepared(static_cast<std::size_t>(n_q * pstride));
  for (int call = 0; call < 3; ++call) {
    const uint64_t serial = next_code_key_serial();
    std::vector<float> projected(static_cast<std::size_t>(r));
    for (int64_t q = 0; q < n_q; ++q) {
      for (float& x : projected) x = normal(rng);
      prepare_code_key_query(projected.data(), c.step.data(), c.lo.data(), r, c.stride, serial,
                             static_cast<uint32_t>(q), prepared.data() + q * pstride);
    }
    std::vector<float> plain(static_cast<std::size_t>(n_q * n_rows)), fast = plain;
    scalar::score_code_keys(prepared.data(), pstride, n_q, c.codes.data(), c.stride, n_rows, plain.data(), n_rows);
    score_code_keys(prepared.data(), pstride, n_q, c.codes.data(), c.stride, n_rows, fast.data(), n_rows);
    ASSERT_EQ(fast, plain) << "call " << call;
  }
  // Blocks of one call that start at different queries (other units' queries), the same count:
  // other indices, so other tiles.
  for (int64_t first : {0, 1, 0}) {
    std::vector<float> plain(static_cast<std::size_t>(8 * n_rows)), fast = plain;
    const float* block = prepared.data() + first * pstride;
    scalar::score_code_keys(block, pstride, 8, c.codes.data(), c.stride, n_rows, plain.data(), n_rows);
    score_code_keys(block, pstride, 8, c.codes.data(), c.stride, n_rows, fast.data(), n_rows);
    ASSERT_EQ(fast, plain) << "queries from " << first;
  }
}

TEST(CodeKeyScores, NonFiniteQueryGivesNonFiniteScores) {
  std::mt19937 rng(4);
  const int64_t r = 64;
  const Case c = make_case(r, 16, rng);
  std::vector<float> projected(static_cast<std::size_t>(r), 0.5f);
  projected[3] = INFINITY;
  std::vector<float> prepared(static_cast<std::size_t>(code_key_query_floats(c.stride)));
  prepare_code_key_query(projected.data(), c.step.data(), c.lo.data(), r, c.stride, next_code_key_serial(), 0,
                         prepared.data());
  std::vector<float> scores(16);
  score_code_keys(prepared.data(), 0, 1, c.codes.data(), c.stride, 16, scores.data(), 16);
  for (float s : scores) EXPECT_FALSE(std::isfinite(s));
}

}  // namespace
}  // namespace veloxquant::attention::kernels
