// The pair-tile key scorer (attention/latent_pair_tiles.h) on every SIMD target this machine
// runs, bit for bit against the shared scorer it stands in for (lm::kernels::tiles::score_rows
// over the same rows, dispatched with the same targets allowed), for widths with and without a last partial chunk
// (kvtc's ranks 185-192), a GQA group of 9 queries and its remainders, and tiles of one to three passes of 8 rows; and
// the layout itself against its definition.
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL too
#include <gtest/gtest.h>

#include <hwy/targets.h>

#include <cstdint>
#include <random>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/latent_pair_tiles.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(LatentPairTiles, LayoutHoldsEveryElementWhereTheHeaderSays) {
  const int64_t n_rows = 16, d = 21, stride = 23, chunks = d / 8, t_count = d % 8;
  std::vector<float> rows(static_cast<std::size_t>(n_rows * stride));
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  std::vector<float> tile(static_cast<std::size_t>(pair_tile_floats(n_rows, d)), -1.0f);
  pair_tile_from_rows(rows.data(), stride, n_rows, d, tile.data());
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int64_t e = 0; e < d; ++e) {
      const int64_t at = e < 8 * chunks
                             ? ((j / 2) * chunks + e / 8) * 16 + (j % 2) * 8 + e % 8
                             : (n_rows / 2) * chunks * 16 + ((j / 8) * t_count + (e - 8 * chunks)) * 8 + j % 8;
      ASSERT_EQ(tile[static_cast<std::size_t>(at)], rows[static_cast<std::size_t>(j * stride + e)])
          << "row " << j << " element " << e;
    }
  }
}

TEST(LatentPairTiles, ScoresAreThoseOfTheSharedScorer) {
  std::mt19937 rng(17);
  bool direct = false;
  for (int64_t d : {1, 7, 8, 17, 64, 96, 150, 185, 189, 192}) {
    for (int64_t n_q : {1, 2, 3, 4, 5, 9}) {
      for (int64_t n_rows : {8, 16, 24}) {
        const int64_t q_stride = d + 3, row_stride = d + 5, ld = n_rows + 3;
        const std::vector<float> q = random_floats(static_cast<std::size_t>(n_q * q_stride), rng);
        const std::vector<float> rows = random_floats(static_cast<std::size_t>(n_rows * row_stride), rng);
        std::vector<float> tile(static_cast<std::size_t>(pair_tile_floats(n_rows, d)));
        pair_tile_from_rows(rows.data(), row_stride, n_rows, d, tile.data());
        test_support::for_each_simd_target([&](const char* target) {
          // The shared scorer as it dispatches with the same targets allowed.
          std::vector<float> want(static_cast<std::size_t>(n_q * ld), -7.0f), got(want);
          lm::kernels::tiles::score_rows(q.data(), q_stride, n_q, rows.data(), row_stride, n_rows, d, want.data(), ld);
          score_pair_tile(q.data(), q_stride, n_q, tile.data(), n_rows, d, got.data(), ld);
          direct = direct || pair_tiles_direct();
          ASSERT_EQ(got, want) << target << " d " << d << " queries " << n_q << " rows " << n_rows;
        });
      }
    }
  }
  // On an AVX-512 machine the direct kernel was among the targets checked.
  if (hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL)) {
    EXPECT_TRUE(direct);
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
