#pragma once
// Dense linear algebra the low-rank and PCA methods need (PALU, KVTC, xKV, Q-Filters-style
// directions): thin SVD, PCA and symmetric eigen-decomposition, computed by Eigen 3
// (Debian's libeigen3-dev), not by hand-written decompositions. Eigen is confined to
// linalg.cpp: callers see plain row-major std::vector<double> results, so one translation unit
// pays Eigen's compile time and no public header needs it.
//
// Determinism: every decomposition here is deterministic for a given input, and singular /
// eigen vectors are sign-normalised (the component of largest magnitude of each right vector /
// eigenvector is made positive, the lowest index winning ties) so two runs, or a cache and its
// restored copy, agree on the basis and not only up to sign.
#include <cstdint>
#include <vector>

namespace veloxquant::linalg {

// x ≈ sum_i sigma[i] * left_i * right_i^T with left_i of length rows and right_i of length cols.
struct Svd {
  int64_t rows = 0, cols = 0, rank = 0;  // rank = min(rows, cols) triplets are returned
  std::vector<double> sigma;             // [rank], descending
  std::vector<double> left;              // [rank][rows], unit vectors
  std::vector<double> right;             // [rank][cols], unit vectors
};

// Thin SVD of the row-major rows x cols matrix x (rows, cols >= 1). Throws
// std::invalid_argument for an empty shape and std::runtime_error if x holds a non-finite value.
Svd thin_svd(const float* x, int64_t rows, int64_t cols);

// Eigen-decomposition of the symmetric n x n matrix a (row-major; only the lower triangle is
// read). values descending; vectors[i] (row i of [n][n]) is the unit eigenvector of values[i].
struct SymmetricEigen {
  int64_t n = 0;
  std::vector<double> values;
  std::vector<double> vectors;
};
SymmetricEigen symmetric_eigen(const double* a, int64_t n);

// Principal components of the rows of x (rows x cols, row-major): the eigen-decomposition of
// the covariance (1 / rows) * sum (x_r - mean)(x_r - mean)^T, mean all zero when center is
// false. variance[i] is the mean squared projection on components[i] (descending), so the
// energy rule "keep the smallest r whose variances sum to >= t of the total" applies directly.
struct Pca {
  int64_t dim = 0;
  std::vector<double> mean;        // [dim]
  std::vector<double> variance;    // [dim], descending
  std::vector<double> components;  // [dim][dim], row i = i-th principal direction
};
Pca pca(const float* x, int64_t rows, int64_t cols, bool center);

// The smallest r with sum_{i<r} v[i] >= threshold * sum_i v[i] for a descending non-negative
// spectrum v (0 when the sum is 0; threshold is clamped to [0, 1]). For singular values pass
// their squares.
int64_t energy_rank_of(const std::vector<double>& v, double threshold);

}  // namespace veloxquant::linalg
