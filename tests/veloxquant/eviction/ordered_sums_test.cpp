// cam's and nestedkv's double sums on every SIMD target this machine runs: cam's key dots equal
// the scalar loop bit for bit (ragged counts and widths, a shuffled index; the loop is the
// definition, spot-checked here), and nestedkv's anchor scores equal the one-sum-at-a-time
// reference bit for bit (key counts and widths off the SIMD blocks, blocks of 128 and of
// n / 32 keys, windows of a power of two and not, a zero key).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "veloxquant/eviction/anchor_scores.h"
#include "veloxquant/eviction/ordered_sums.h"
#include "support/simd_targets.h"

namespace veloxquant::eviction {
namespace {

template <class T>
std::vector<T> random_values(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> out(n);
  for (T& v : out) v = static_cast<T>(normal(rng));
  return out;
}

TEST(OrderedSums, RowDotsEqualTheScalarLoopBitForBit) {
  for (const int64_t dim : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{65}}) {
    for (const int64_t count : {int64_t{1}, int64_t{9}, int64_t{300}}) {
      const int64_t rows = count + 5;
      const std::vector<float> keys = random_values<float>(static_cast<std::size_t>(rows * dim), 3);
      const std::vector<float> v = random_values<float>(static_cast<std::size_t>(dim), 4);
      std::vector<int32_t> index(static_cast<std::size_t>(rows));
      std::iota(index.begin(), index.end(), 0);
      std::shuffle(index.begin(), index.end(), std::mt19937(5));
      index.resize(static_cast<std::size_t>(count));
      std::vector<double> want(static_cast<std::size_t>(count));
      scalar::indexed_row_dots(keys.data(), index.data(), count, dim, v.data(), want.data());
      double first = 0.0;  // the definition, for the first row
      for (int64_t e = 0; e < dim; ++e) first += double(keys[static_cast<std::size_t>(index[0] * dim + e)]) * v[e];
      ASSERT_EQ(want[0], first);
      test_support::for_each_simd_target([&](const char* target) {
        std::vector<double> got(static_cast<std::size_t>(count));
        indexed_row_dots(keys.data(), index.data(), count, dim, v.data(), got.data());
        ASSERT_EQ(got, want) << target << " dim " << dim << " count " << count;
      });
    }
  }
}

// One window: the anchor scores of the n keys, in order and through the reversed row list, on
// every target equal to the scalar reference bit for bit.
void check_anchor_scores(const std::vector<float>& keys, const std::vector<int32_t>& rows, int64_t n, int64_t dim,
                         int64_t window) {
  for (const int32_t* r : {static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(rows.data())}) {
    const AnchorParams params{window, 3.0, 0.6, 10.0};
    std::vector<float> want(static_cast<std::size_t>(n));
    scalar::nested_anchor_scores(keys.data(), r, n, dim, params, want.data());
    test_support::for_each_simd_target([&](const char* target) {
      std::vector<float> got(want.size());
      nested_anchor_scores(keys.data(), r, n, dim, params, got.data());
      ASSERT_EQ(got, want) << target << " dim " << dim << " n " << n << " window " << window;
    });
  }
}

TEST(OrderedSums, AnchorScoresEqualTheScalarReferenceBitForBit) {
  for (const int64_t dim : {int64_t{5}, int64_t{64}, int64_t{70}}) {
    for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{37}, int64_t{513}, int64_t{1030}, int64_t{4500}}) {
      std::vector<float> keys = random_values<float>(static_cast<std::size_t>((n + 3) * dim), 12);
      std::fill(keys.begin() + 2 * dim, keys.begin() + 3 * dim, 0.0f);  // a zero key (norm floor)
      std::vector<int32_t> rows(static_cast<std::size_t>(n));
      std::iota(rows.begin(), rows.end(), 3);
      std::reverse(rows.begin(), rows.end());
      for (const int64_t window : {int64_t{1}, int64_t{24}, int64_t{64}, int64_t{100}}) {
        check_anchor_scores(keys, rows, n, dim, window);
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::eviction
