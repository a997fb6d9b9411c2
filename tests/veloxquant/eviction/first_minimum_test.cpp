// The victim search's first minimum on every SIMD target this machine runs: the index the loop
// "take i when i == 0 or x[i] < best" finds — ties going to the earliest, +0 and -0 tied, a NaN
// taken only at index 0 — on hand-made arrays and on random ones of ragged lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "veloxquant/eviction/first_minimum.h"
#include "support/simd_targets.h"

namespace veloxquant::eviction {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Both the reference and the dispatched search must give `want` on every target.
void expect_first_minimum(const std::vector<float>& x, int64_t want) {
  const int64_t n = static_cast<int64_t>(x.size());
  ASSERT_EQ(scalar::first_minimum(x.data(), n), want);
  test_support::for_each_simd_target(
      [&](const char* target) { EXPECT_EQ(first_minimum(x.data(), n), want) << target << " n " << n; });
}

TEST(FirstMinimum, TiesGoToTheEarliest) {
  expect_first_minimum({3.0f}, 0);
  expect_first_minimum({2.0f, 1.0f, 1.0f, 5.0f}, 1);
  // A tie across vector blocks: 40 ones, then the minimum 0.5 at 17 and again at 33.
  std::vector<float> x(40, 1.0f);
  x[17] = 0.5f;
  x[33] = 0.5f;
  expect_first_minimum(x, 17);
  // The minimum only in the tail past the last whole vector, twice.
  x.assign(37, 1.0f);
  x[35] = -2.0f;
  x[36] = -2.0f;
  expect_first_minimum(x, 35);
  // +0 and -0 compare equal: whichever comes first.
  expect_first_minimum({1.0f, 0.0f, -0.0f, 2.0f}, 1);
  expect_first_minimum({1.0f, -0.0f, 0.0f, 2.0f}, 1);
  expect_first_minimum({1.0f, 3.0f, -INFINITY, -INFINITY}, 2);
}

TEST(FirstMinimum, NaNIsTakenOnlyFirst) {
  std::vector<float> x(30, 1.0f);
  x[0] = kNaN;
  x[20] = -5.0f;
  expect_first_minimum(x, 0);  // nothing compares below index 0's NaN
  x[0] = 2.0f;
  x[3] = kNaN;
  x[25] = kNaN;
  expect_first_minimum(x, 20);  // NaNs elsewhere never win
  std::vector<float> all_nan(19, kNaN);
  expect_first_minimum(all_nan, 0);
}

TEST(FirstMinimum, RandomArraysOfRaggedLengths) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(0, 9);  // few distinct values: many ties
  for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{63}, int64_t{2581}}) {
    for (int round = 0; round < 20; ++round) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (float& v : x) v = static_cast<float>(small(rng)) * 0.25f;
      int64_t want = 0;  // the definition
      for (int64_t i = 1; i < n; ++i) {
        if (x[static_cast<std::size_t>(i)] < x[static_cast<std::size_t>(want)]) want = i;
      }
      expect_first_minimum(x, want);
    }
  }
}

}  // namespace
}  // namespace veloxquant::eviction
