// kvtc's integer key scores (attention/code_row_scores.h): every SIMD target equal to the scalar
// reference bit for bit (the sums are exact integers), the reference equal to its formula from
// the prepared query, and the scores within the 16-bit rounding of the query of the float
// scores sum_i p_i (lo_i + step_i c_i) they stand for.
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL, which the kernel compiles
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "veloxquant/attention/code_row_scores.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

// One (rank, queries, rows) case: random components (every seventh dropped: step and lo 0),
// queries and 8-bit codes; the scalar reference equal to its formula from the prepared query
// and near the float scores, every target equal to the reference bit for bit.
void check_case(int64_t r, int64_t n_q, int64_t n_rows, std::mt19937& rng, std::normal_distribution<float>& normal,
                std::uniform_int_distribution<int>& code8) {
  const int64_t stride = (r + 31) / 32 * 32;
  std::vector<float> step(static_cast<std::size_t>(r)), lo(step.size()), p(static_cast<std::size_t>(n_q * r));
  for (int64_t i = 0; i < r; ++i) {
    // Some 0-bit components (step and lo 0), the rest spread over magnitudes.
    const bool dropped = i % 7 == 6;
    step[static_cast<std::size_t>(i)] = dropped ? 0.0f : std::exp(normal(rng)) * 0.05f;
    lo[static_cast<std::size_t>(i)] = dropped ? 0.0f : normal(rng) * 3.0f;
  }
  for (float& x : p) x = normal(rng) * 2.0f;
  std::vector<int16_t> codes(static_cast<std::size_t>(n_rows * stride), 0);
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int64_t i = 0; i < r; ++i) codes[static_cast<std::size_t>(j * stride + i)] = static_cast<int16_t>(code8(rng));
  }
  const int64_t pd = code_query_floats(stride) + 1;  // a gap between prepared queries
  std::vector<float> prepared(static_cast<std::size_t>(n_q * pd), 0.0f);
  for (int64_t q = 0; q < n_q; ++q) {
    prepare_code_query(p.data() + q * r, step.data(), lo.data(), r, stride, prepared.data() + q * pd);
  }
  const int64_t ld = n_rows + 3;
  std::vector<float> want(static_cast<std::size_t>(n_q * ld), -5.0f);
  scalar::score_code_rows(prepared.data(), pd, n_q, codes.data(), stride, n_rows, want.data(), ld);
  for (int64_t q = 0; q < n_q; ++q) {
    const float* pq = prepared.data() + q * pd;
    std::vector<int16_t> a(static_cast<std::size_t>(stride));
    std::memcpy(a.data(), pq + 2, a.size() * sizeof(int16_t));
    for (int64_t j = 0; j < n_rows; ++j) {
      int64_t sum = 0;
      double exact = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < stride; ++i)
        sum += int64_t{a[static_cast<std::size_t>(i)]} * codes[static_cast<std::size_t>(j * stride + i)];
      for (int64_t i = 0; i < r; ++i) {
        const auto at = static_cast<std::size_t>(i);
        const double z = lo[at] + static_cast<double>(step[at]) * codes[static_cast<std::size_t>(j * stride + i)];
        exact += p[static_cast<std::size_t>(q * r + i)] * z;
        magnitude += std::fabs(p[static_cast<std::size_t>(q * r + i)] * z);
      }
      const float s = static_cast<float>(sum);
      const float formula = s * pq[0] + pq[1];
      ASSERT_EQ(want[static_cast<std::size_t>(q * ld + j)], formula);
      // Each a_i is off by at most half a unit of scale; codes are at most 255.
      EXPECT_NEAR(want[static_cast<std::size_t>(q * ld + j)], exact, 0.5 * pq[0] * 255.0 * r + 1e-5 * magnitude)
          << "rank " << r << " query " << q << " row " << j;
    }
  }
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> got(want.size(), -5.0f);
    score_code_rows(prepared.data(), pd, n_q, codes.data(), stride, n_rows, got.data(), ld);
    ASSERT_EQ(got, want) << target << " rank " << r << " queries " << n_q << " rows " << n_rows;
  });
}

TEST(CodeRowScores, EveryTargetEqualsTheReferenceAndTheFloatScores) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> code8(0, 255);
  for (int64_t r : {1, 31, 64, 150, 192, 300}) {
    for (int64_t n_q : {1, 3, 4, 9}) {
      for (int64_t n_rows : {1, 4, 15, 16, 64, 67}) {
        check_case(r, n_q, n_rows, rng, normal, code8);
        if (HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
