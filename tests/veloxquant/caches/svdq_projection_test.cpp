// svdq's latent projection in SIMD (caches/svdq_projection.h) against the flush's scalar double
// loop, bit for bit, on every SIMD target this machine runs: latent counts that fill whole vectors
// and that leave a tail, head dims of 48, 64 and 128, rows of ordinary and of large magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "veloxquant/caches/svdq_projection.h"
#include "support/simd_targets.h"

namespace veloxquant {
namespace {

TEST(SvdqProjection, SimdMatchesScalarOnEveryTarget) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t dim : {int64_t{48}, int64_t{64}, int64_t{128}}) {
    for (const int64_t coded : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{40}, dim}) {
      const int64_t rows = 33;
      std::vector<float> basis(static_cast<std::size_t>(coded * dim)), keys(static_cast<std::size_t>(rows * dim));
      for (float& v : basis) v = normal(rng) / 8.0f;
      for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = normal(rng) * (i % 17 == 0 ? 300.0f : 1.0f);
      std::vector<float> want(static_cast<std::size_t>(rows * coded)), got(want.size());
      scalar::project_latent_rows(basis.data(), coded, dim, keys.data(), rows, want.data());
      std::vector<double> scratch(static_cast<std::size_t>(svdq_projection_scratch(coded, dim)));
      test_support::for_each_simd_target([&](const char* target) {
        std::fill(got.begin(), got.end(), -7.0f);
        project_latent_rows(basis.data(), coded, dim, keys.data(), rows, scratch.data(), got.data());
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << target << " dim " << dim << " coded " << coded;
      });
      // And it is the projection (against a direct double dot).
      double dot = 0.0;
      for (int64_t c = 0; c < dim; ++c)
        dot += double{basis[static_cast<std::size_t>(c)]} * keys[static_cast<std::size_t>(c)];
      ASSERT_NEAR(want[0], dot, 1e-4 * (1.0 + std::abs(dot)));
    }
  }
}

}  // namespace
}  // namespace veloxquant
