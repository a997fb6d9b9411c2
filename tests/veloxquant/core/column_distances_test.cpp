// The SIMD column distances and nearest-column search against their scalar references (bit for
// bit, on every SIMD target this machine runs) and against core::nearest_centroid over the same
// points in row layout (the index a2ats's k-means and encoder picked before the SIMD loop).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "veloxquant/core/column_distances.h"
#include "veloxquant/core/kmeans.h"
#include "support/simd_targets.h"

namespace veloxquant::core {
namespace {

TEST(ColumnDistances, MatchScalarAndNearestCentroid) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int64_t count : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}, int64_t{256}, int64_t{1029}}) {
    for (const int64_t dim : {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{16}, int64_t{17}}) {
      // Points row-major, and as columns with a padded leading dimension.
      const int64_t ld = count + 3;
      std::vector<float> rows(static_cast<std::size_t>(count * dim));
      for (float& v : rows) v = dist(rng);
      // Duplicates: later copies tie exactly with earlier points; the lower index must win.
      for (int64_t c = count / 2; c + 1 < count; c += 5) {
        for (int64_t k = 0; k < dim; ++k) rows[c * dim + k] = rows[(c - count / 2) * dim + k];
      }
      std::vector<float> cols(static_cast<std::size_t>(ld * dim), 1e30f);
      for (int64_t c = 0; c < count; ++c) {
        for (int64_t k = 0; k < dim; ++k) cols[k * ld + c] = rows[c * dim + k];
      }
      for (int trial = 0; trial < 24; ++trial) {
        std::vector<float> v(static_cast<std::size_t>(dim));
        if (trial % 3 == 0) {  // exactly on a (possibly duplicated) point
          const int64_t c = (count / 2 + trial) % count;
          for (int64_t k = 0; k < dim; ++k) v[k] = rows[c * dim + k];
        } else {
          for (float& x : v) x = dist(rng);
        }
        const int32_t want = nearest_centroid(v.data(), rows.data(), count, dim);
        ASSERT_EQ(scalar::nearest_column(v.data(), cols.data(), count, dim, ld), want);
        std::vector<double> ref(static_cast<std::size_t>(count));
        scalar::column_distances(v.data(), cols.data(), count, dim, ld, ref.data());
        test_support::for_each_simd_target([&](const char* target) {
          ASSERT_EQ(nearest_column(v.data(), cols.data(), count, dim, ld), want)
              << target << " count " << count << " dim " << dim << " trial " << trial;
          std::vector<double> got(static_cast<std::size_t>(count));
          column_distances(v.data(), cols.data(), count, dim, ld, got.data());
          ASSERT_EQ(got, ref) << target << " count " << count << " dim " << dim;
        });
      }
    }
  }
}

TEST(ColumnDistances, NothingFiniteIsIndexZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> cols(40, inf), v = {0.0f};
  test_support::for_each_simd_target(
      [&](const char* target) { EXPECT_EQ(nearest_column(v.data(), cols.data(), 40, 1, 40), 0) << target; });
  EXPECT_EQ(scalar::nearest_column(v.data(), cols.data(), 40, 1, 40), 0);
}

}  // namespace
}  // namespace veloxquant::core
