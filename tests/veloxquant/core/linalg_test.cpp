// linalg wraps Eigen; these tests hold it to properties that fail on a wrong wrapper (a
// transposed copy, unsorted or unnormalised output, a sign flip applied to one side only) and
// to an independent decomposition: the hand-written Jacobi SVD of caches/block_svd.h.
#include "veloxquant/core/linalg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "veloxquant/caches/block_svd.h"
#include "veloxquant/core/rng.h"

namespace veloxquant::linalg {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  core::Rng rng(seed);
  std::vector<float> x(rows * cols);
  // Columns with different scales so the spectrum is spread out and the order matters.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = static_cast<float>(rng.normal() * (1.0 + c));
  }
  return x;
}

void expect_orthonormal(const std::vector<double>& v, int64_t count, int64_t len) {
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t j = 0; j < count; ++j) {
      double dot = 0.0;
      for (int64_t t = 0; t < len; ++t) dot += v[i * len + t] * v[j * len + t];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-10) << i << "," << j;
    }
  }
}

class ThinSvdShapes : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(ThinSvdShapes, ReconstructsSortedOrthonormalAndMatchesJacobi) {
  const auto [rows, cols] = GetParam();
  const std::vector<float> x = random_matrix(rows, cols, 7 + rows * 31 + cols);
  const Svd svd = thin_svd(x.data(), rows, cols);
  ASSERT_EQ(svd.rank, std::min(rows, cols));
  for (int64_t i = 1; i < svd.rank; ++i) EXPECT_GE(svd.sigma[i - 1], svd.sigma[i]);
  expect_orthonormal(svd.left, svd.rank, rows);
  expect_orthonormal(svd.right, svd.rank, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double v = 0.0;
      for (int64_t i = 0; i < svd.rank; ++i) v += svd.sigma[i] * svd.left[i * rows + r] * svd.right[i * cols + c];
      EXPECT_NEAR(v, x[r * cols + c], 1e-9 * (1.0 + std::fabs(x[r * cols + c])));
    }
  }
  // An independent algorithm (cyclic Jacobi on the Gram matrix) finds the same spectrum and,
  // up to sign, the same leading right vectors.
  const BlockSvd jacobi = block_svd(x.data(), rows, cols);
  for (int64_t i = 0; i < svd.rank; ++i) {
    EXPECT_NEAR(svd.sigma[i], jacobi.sigma[i], 1e-6 * svd.sigma[0]) << i;
  }
  double dot = 0.0;
  for (int64_t c = 0; c < cols; ++c) dot += svd.right[c] * jacobi.right[c];
  EXPECT_NEAR(std::fabs(dot), 1.0, 1e-6);
  // Sign convention: the largest-magnitude entry of each right vector is positive.
  for (int64_t i = 0; i < svd.rank; ++i) {
    double best = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      if (std::fabs(svd.right[i * cols + c]) > std::fabs(best)) best = svd.right[i * cols + c];
    }
    EXPECT_GT(best, 0.0) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ThinSvdShapes,
                         ::testing::Values(std::pair{1, 1}, std::pair{1, 5}, std::pair{5, 1}, std::pair{12, 8},
                                           std::pair{8, 12}, std::pair{64, 64}, std::pair{300, 16}));

TEST(ThinSvd, RankOneMatrixHasOneNonZeroSingularValue) {
  // x = a b^T with |a| = 5, |b| = 13: sigma_0 = 65, the rest 0.
  const std::vector<double> a = {3, 4}, b = {5, 12};
  std::vector<float> x;
  for (double ai : a)
    for (double bj : b) x.push_back(static_cast<float>(ai * bj));
  const Svd svd = thin_svd(x.data(), 2, 2);
  EXPECT_NEAR(svd.sigma[0], 65.0, 1e-12);
  EXPECT_NEAR(svd.sigma[1], 0.0, 1e-12);
  EXPECT_NEAR(svd.right[0], 5.0 / 13.0, 1e-12);
  EXPECT_NEAR(svd.right[1], 12.0 / 13.0, 1e-12);
}

TEST(ThinSvd, RefusesEmptyShapesAndNonFiniteValues) {
  const float one = 1.0f;
  EXPECT_THROW(thin_svd(&one, 0, 1), std::invalid_argument);
  EXPECT_THROW(thin_svd(&one, 1, 0), std::invalid_argument);
  std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  try {
    thin_svd(bad.data(), 1, 2);
    FAIL() << "NaN accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("column 1"), std::string::npos) << e.what();
  }
}

TEST(SymmetricEigen, KnownSpectrumDescending) {
  // [[2,1],[1,2]] has eigenvalues 3 (vector (1,1)/sqrt2) and 1 (vector (1,-1)/sqrt2).
  const std::vector<double> a = {2, 1, 1, 2};
  const SymmetricEigen e = symmetric_eigen(a.data(), 2);
  EXPECT_NEAR(e.values[0], 3.0, 1e-12);
  EXPECT_NEAR(e.values[1], 1.0, 1e-12);
  EXPECT_NEAR(e.vectors[0], std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(e.vectors[1], std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(std::fabs(e.vectors[2]), std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(e.vectors[2], -e.vectors[3], 1e-12);
}

TEST(Pca, VariancesSumToTheTotalAndComponentsDiagonaliseTheCovariance) {
  const int64_t rows = 500, cols = 6;
  std::vector<float> x = random_matrix(rows, cols, 99);
  for (int64_t r = 0; r < rows; ++r) x[r * cols + 2] += 10.0f;  // an offset the centring removes
  const Pca p = pca(x.data(), rows, cols, /*center=*/true);
  EXPECT_NEAR(p.mean[2], 10.0, 0.5);
  double total = 0.0;
  for (int64_t c = 0; c < cols; ++c) {
    double m = 0.0, s = 0.0;
    for (int64_t r = 0; r < rows; ++r) m += x[r * cols + c];
    m /= rows;
    for (int64_t r = 0; r < rows; ++r) s += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    total += s / rows;
  }
  double sum = 0.0;
  for (double v : p.variance) sum += v;
  EXPECT_NEAR(sum, total, 1e-9 * total);
  expect_orthonormal(p.components, cols, cols);
  // The projection on component i has mean square variance[i].
  for (int64_t i = 0; i < cols; ++i) {
    double ms = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      double proj = 0.0;
      for (int64_t c = 0; c < cols; ++c) proj += (x[r * cols + c] - p.mean[c]) * p.components[i * cols + c];
      ms += proj * proj;
    }
    EXPECT_NEAR(ms / rows, p.variance[i], 1e-8 * total) << i;
  }
  // Uncentred: the offset column dominates the first component.
  const Pca raw = pca(x.data(), rows, cols, /*center=*/false);
  EXPECT_EQ(raw.mean[2], 0.0);
  EXPECT_GT(std::fabs(raw.components[2]), 0.9);
}

TEST(EnergyRank, SmallestPrefixReachingTheThreshold) {
  const std::vector<double> v = {6, 3, 1};
  EXPECT_EQ(energy_rank_of(v, 0.0), 0);
  EXPECT_EQ(energy_rank_of(v, 0.6), 1);
  EXPECT_EQ(energy_rank_of(v, 0.61), 2);
  EXPECT_EQ(energy_rank_of(v, 0.9), 2);
  EXPECT_EQ(energy_rank_of(v, 0.95), 3);
  EXPECT_EQ(energy_rank_of(v, 2.0), 3);
  EXPECT_EQ(energy_rank_of({0, 0}, 0.5), 0);
}

}  // namespace
}  // namespace veloxquant::linalg
