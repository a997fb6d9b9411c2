// curdkv's Gram kernel: the SIMD path's upper triangle equals the scalar loop of its kind (fused
// multiply-adds on FMA targets, multiply then add elsewhere) bit for bit on every SIMD target this
// machine runs (accumulating into a non-zero matrix, ragged widths), and the scalar loops are the
// definitions (diagonal = sum of squares, computed here independently).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/eviction/upper_gram.h"

namespace veloxquant::eviction {
namespace {

// The scalar loops' diagonals are the definitions: start plus the sum of squares, added one
// product at a time (unfused) or by fused multiply-adds.
void check_scalar_diagonal(const std::vector<double>& rows, const std::vector<double>& start, int64_t count,
                           int64_t dim, const std::vector<double>& unfused, const std::vector<double>& fused) {
  for (int64_t r = 0; r < dim; ++r) {
    double s = start[static_cast<std::size_t>(r * dim + r)], f = s;
    for (int64_t j = 0; j < count; ++j) {
      const double v = rows[static_cast<std::size_t>(j * dim + r)];
      s += v * v;
      f = std::fma(v, v, f);
    }
    ASSERT_EQ(unfused[static_cast<std::size_t>(r * dim + r)], s) << "dim " << dim << " row " << r;
    ASSERT_EQ(fused[static_cast<std::size_t>(r * dim + r)], f) << "dim " << dim << " row " << r;
  }
}

// On target: the dispatched kernel's upper triangle equals the scalar loop of its kind bit for bit.
void check_target(int64_t target, const std::vector<double>& rows, const std::vector<double>& start, int64_t count,
                  int64_t dim, const std::vector<double>& unfused, const std::vector<double>& fused) {
  std::vector<double> got = start;
  hwy::SetSupportedTargetsForTest(target);
  accumulate_upper_gram(rows.data(), count, dim, got.data());
  const std::vector<double>& want = upper_gram_fuses() ? fused : unfused;
  hwy::SetSupportedTargetsForTest(0);
  for (int64_t r = 0; r < dim; ++r) {
    for (int64_t c = r; c < dim; ++c) {
      ASSERT_EQ(got[static_cast<std::size_t>(r * dim + c)], want[static_cast<std::size_t>(r * dim + c)])
          << hwy::TargetName(target) << " dim " << dim << " count " << count << " (" << r << ", " << c << ")";
    }
  }
}

TEST(UpperGram, EveryTargetEqualsTheScalarLoopBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const int64_t dim : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}, int64_t{64}, int64_t{65}}) {
    for (const int64_t count : {int64_t{1}, int64_t{5}, int64_t{37}, int64_t{300}}) {
      std::vector<double> rows(static_cast<std::size_t>(count * dim)), start(static_cast<std::size_t>(dim * dim));
      for (double& v : rows) v = normal(rng) * 1e-2;
      for (double& v : start) v = normal(rng);
      std::vector<double> unfused = start, fused = start;
      scalar::accumulate_upper_gram(rows.data(), count, dim, unfused.data());
      scalar::accumulate_upper_gram_fused(rows.data(), count, dim, fused.data());
      ASSERT_NO_FATAL_FAILURE(check_scalar_diagonal(rows, start, count, dim, unfused, fused));
      for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
        ASSERT_NO_FATAL_FAILURE(check_target(target, rows, start, count, dim, unfused, fused));
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::eviction
