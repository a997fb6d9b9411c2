// The eviction scorers' row logits on every SIMD target this machine runs: each logit is
// lm::kernels::simd::dot_f32's number times the scale, bit for bit (the rows an attention-scored
// policy keeps depend on it), and the maximum is the scalar loop's — over ragged row counts and
// widths off the vector blocks, an index that skips and reorders rows, NaN and infinite logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "lm/kernels/simd_dot.h"
#include "veloxquant/eviction/row_logits.h"
#include "support/random_values.h"
#include "support/simd_targets.h"

namespace veloxquant::eviction {
namespace {

using test_support::normal_values;

// Bitwise equality (NaN equals NaN; +0 and -0 differ).
bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// Every target against the reference, for the index and for rows 0..count-1.
void check_against_reference(int64_t dim, int64_t count, int64_t n_queries) {
  const int64_t rows = count + 7;
  const std::vector<float> keys = normal_values(static_cast<std::size_t>(rows * dim), 11);
  const std::vector<float> queries = normal_values(static_cast<std::size_t>(n_queries * dim), 12);
  std::vector<int32_t> index(static_cast<std::size_t>(rows));
  std::iota(index.begin(), index.end(), 0);
  std::shuffle(index.begin(), index.end(), std::mt19937(13));
  index.resize(static_cast<std::size_t>(count));
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const int64_t stride = count + 3;  // the queries' outputs apart, past the count
  const std::size_t size = static_cast<std::size_t>(n_queries * stride);
  for (const int32_t* rows_or_null : std::vector<const int32_t*>{nullptr, index.data()}) {
    test_support::for_each_simd_target([&](const char* target) {
      std::vector<float> want(size, -7.0f), got(size, -7.0f);
      std::vector<float> want_max(static_cast<std::size_t>(n_queries)), got_max(want_max.size());
      scalar::scaled_row_logits(keys.data(), rows_or_null, count, dim, queries.data(), n_queries, scale, want.data(),
                                stride, want_max.data());
      // The reference is the definition: the last query's last row, dot_f32 on this target
      // times the scale.
      if (count > 0) {
        const int64_t r = rows_or_null ? rows_or_null[count - 1] : count - 1;
        const float* last_query = queries.data() + (n_queries - 1) * dim;
        ASSERT_TRUE(same_bits(want[static_cast<std::size_t>((n_queries - 1) * stride + count - 1)],
                              lm::kernels::simd::dot_f32(keys.data() + r * dim, last_query, dim) * scale));
      }
      scaled_row_logits(keys.data(), rows_or_null, count, dim, queries.data(), n_queries, scale, got.data(), stride,
                        got_max.data());
      for (std::size_t i = 0; i < size; ++i) {
        ASSERT_TRUE(same_bits(got[i], want[i])) << target << " dim " << dim << " queries " << n_queries << " at " << i;
      }
      EXPECT_EQ(got_max, want_max) << target << " dim " << dim << " count " << count;
      if (count == 0) {
        EXPECT_EQ(got_max[0], -INFINITY);
      }
    });
  }
}

TEST(RowLogits, EachLogitIsDotF32TimesTheScaleBitForBit) {
  // Widths off the vector blocks (tails of 1 to 15), one vector more than pairs (80 on AVX-512),
  // the two compiled as constants (64, 128); groups of 1 to 4 queries and 4 + 3.
  for (const int64_t dim : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{48}, int64_t{64}, int64_t{80}, int64_t{128}}) {
    for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{301}}) {
      for (const int64_t n_queries : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}})
        check_against_reference(dim, count, n_queries);
    }
  }
}

TEST(RowLogits, MaximumSkipsNaNsAndKeepsInfinities) {
  const int64_t dim = 4, count = 9;
  std::vector<float> keys(static_cast<std::size_t>(count * dim), 0.0f);
  // Two queries: row j's logits are its first element and its second (times scale 1); the
  // second is the negated first where that is finite, else 0 (an infinity there would meet the
  // first query's 0: NaN).
  const float queries[] = {1, 0, 0, 0, 0, 1, 0, 0};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float first[] = {-3.0f, nan, 2.0f, -INFINITY, 5.0f, 1.0f, -1.0f, 4.0f, nan};
  for (int64_t j = 0; j < count; ++j) {
    keys[static_cast<std::size_t>(j * dim)] = first[j];
    keys[static_cast<std::size_t>(j * dim + 1)] = std::isfinite(first[j]) ? -first[j] : 0.0f;
  }
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> out(static_cast<std::size_t>(2 * count));
    float maxima[2];
    scaled_row_logits(keys.data(), nullptr, count, dim, queries, 2, 1.0f, out.data(), count, maxima);
    EXPECT_EQ(maxima[0], 5.0f) << target;
    EXPECT_EQ(maxima[1], 3.0f) << target;
    EXPECT_TRUE(std::isnan(out[1])) << target;
    EXPECT_EQ(out[3], -INFINITY) << target;
    // Only NaNs and -inf: the maximum is -inf, as the scalar loop's.
    const int32_t bad[] = {1, 3, 8};
    scaled_row_logits(keys.data(), bad, 3, dim, queries, 1, 1.0f, out.data(), 3, maxima);
    EXPECT_EQ(maxima[0], -INFINITY) << target;
    const int32_t with_inf[] = {0, 1, 2};
    keys[0] = INFINITY;
    scaled_row_logits(keys.data(), with_inf, 3, dim, queries, 1, 1.0f, out.data(), 3, maxima);
    EXPECT_EQ(maxima[0], INFINITY) << target;
    keys[0] = -3.0f;
  });
}

}  // namespace
}  // namespace veloxquant::eviction
