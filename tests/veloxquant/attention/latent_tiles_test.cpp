// The true-latent kernels (attention/latent_tiles.h) on every SIMD target this machine runs,
// bit for bit: the scorer and the value accumulation against the shared tile kernels they
// replace (lm::kernels::tiles::score_rows / accumulate_rows on the same target), the projection
// and the row rebuild against their scalar references. Shapes cover whole and partial passes of
// rows, row widths off the vector width, odd query counts and a decode step's single token.
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL too
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/latent_tiles.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(LatentTiles, ScoresAreThoseOfTheSharedScorer) {
  std::mt19937 rng(5);
  for (int64_t d : {1, 7, 8, 17, 64, 96, 150, 192}) {
    for (int64_t n_q : {1, 2, 3, 9}) {
      for (int64_t n_rows : {1, 7, 8, 16, 29}) {
        const int64_t q_stride = d + 3, row_stride = d + (d % 2), ld = n_rows + 5;
        const std::vector<float> q = random_floats(static_cast<std::size_t>(n_q * q_stride), rng);
        const std::vector<float> rows = random_floats(static_cast<std::size_t>(n_rows * row_stride), rng);
        test_support::for_each_simd_target([&](const char* target) {
          std::vector<float> want(static_cast<std::size_t>(n_q * ld), -7.0f), got(want);
          lm::kernels::tiles::score_rows(q.data(), q_stride, n_q, rows.data(), row_stride, n_rows, d, want.data(), ld);
          score_latent_rows(q.data(), q_stride, n_q, rows.data(), row_stride, n_rows, d, got.data(), ld);
          ASSERT_EQ(got, want) << target << " d " << d << " queries " << n_q << " rows " << n_rows;
        });
      }
    }
  }
}

TEST(LatentTiles, ValueSumsAreThoseOfTheSharedAccumulation) {
  std::mt19937 rng(6);
  // 150, 176, 185 and 189 leave 1 to 4 vectors (the last one partial) past the 4-vector passes.
  for (int64_t d : {1, 7, 8, 17, 64, 96, 150, 176, 185, 189, 192}) {
    for (int64_t n_q : {1, 2, 3, 4, 9}) {
      for (int64_t n_rows : {1, 8, 16, 29}) {
        const int64_t ld = n_rows + 2, row_stride = d + 1, acc_stride = d + 4;
        const std::vector<float> w = random_floats(static_cast<std::size_t>(n_q * ld), rng, 0.3f);
        const std::vector<float> rows = random_floats(static_cast<std::size_t>(n_rows * row_stride), rng);
        const std::vector<float> start = random_floats(static_cast<std::size_t>(n_q * acc_stride), rng);
        test_support::for_each_simd_target([&](const char* target) {
          std::vector<float> want(start), got(start);
          lm::kernels::tiles::accumulate_rows(w.data(), ld, n_q, rows.data(), row_stride, n_rows, d, want.data(),
                                              acc_stride);
          accumulate_latent_rows(w.data(), ld, n_q, rows.data(), row_stride, n_rows, d, got.data(), acc_stride);
          ASSERT_EQ(got, want) << target << " d " << d << " queries " << n_q << " rows " << n_rows;
        });
      }
    }
  }
}

TEST(LatentTiles, ProjectionIsTheScalarDoubleSum) {
  std::mt19937 rng(7);
  for (int64_t w : {5, 64, 192}) {
    for (int64_t r : {int64_t{1}, int64_t{3}, int64_t{31}, int64_t{32}, int64_t{40}, int64_t{48}, int64_t{64},
                      int64_t{100}, int64_t{189}, w}) {
      for (int64_t n : {1, 3, 8, 13, 64}) {
        const int64_t stride = w + 2;
        // Values spread over many magnitudes, so that the order of a sum shows in its bits.
        std::vector<float> basis = random_floats(static_cast<std::size_t>(r * stride), rng);
        std::vector<float> x = random_floats(static_cast<std::size_t>(n * w), rng, 3.0f);
        for (std::size_t i = 0; i < x.size(); i += 5) x[i] *= 1e4f;
        std::vector<float> want(static_cast<std::size_t>(n * r));
        scalar::project_latents(basis.data(), stride, r, x.data(), w, n, want.data());
        test_support::for_each_simd_target([&](const char* target) {
          std::vector<float> got(want.size(), -1.0f);
          project_latents(basis.data(), stride, r, x.data(), w, n, got.data());
          ASSERT_EQ(got, want) << target << " width " << w << " rank " << r << " tokens " << n;
        });
      }
    }
  }
}

TEST(LatentTiles, RebuiltRowsAreTheScalarOnes) {
  std::mt19937 rng(8);
  for (int64_t w : {5, 64, 150, 192}) {
    for (int64_t r : {1, 7, 64, 189, 192}) {
      for (int64_t n : {1, 4, 5, 7, 64}) {
        const int64_t stride = w + 3, out_stride = w + 1;
        const std::vector<float> basis = random_floats(static_cast<std::size_t>(r * stride), rng);
        const std::vector<float> mu = random_floats(static_cast<std::size_t>(w), rng);
        const std::vector<float> z = random_floats(static_cast<std::size_t>(n * r), rng, 4.0f);
        std::vector<float> want(static_cast<std::size_t>(n * out_stride), 0.0f);
        scalar::reconstruct_latent_rows(basis.data(), stride, r, mu.data(), z.data(), w, n, want.data(), out_stride);
        // The reference rounds every product before its sum (no fused multiply-add).
        float first = mu[0];
        for (int64_t i = 0; i < r; ++i) {
          volatile float p = z[static_cast<std::size_t>(i)] * basis[static_cast<std::size_t>(i * stride)];
          first = first + p;
        }
        ASSERT_EQ(want[0], first);
        test_support::for_each_simd_target([&](const char* target) {
          std::vector<float> got(want.size(), 0.0f);
          reconstruct_latent_rows(basis.data(), stride, r, mu.data(), z.data(), w, n, got.data(), out_stride);
          ASSERT_EQ(got, want) << target << " width " << w << " rank " << r << " tokens " << n;
        });
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
