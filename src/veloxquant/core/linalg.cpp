#include "veloxquant/core/linalg.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace veloxquant::linalg {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void require_shape(int64_t rows, int64_t cols, const char* what) {
  if (rows < 1 || cols < 1) {
    throw std::invalid_argument(std::string(what) + ": needs at least one row and one column, got " +
                                std::to_string(rows) + " x " + std::to_string(cols));
  }
}

RowMatrix to_double(const float* x, int64_t rows, int64_t cols, const char* what) {
  RowMatrix m(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      if (!std::isfinite(v)) {
        throw std::runtime_error(std::string(what) + ": non-finite value at row " + std::to_string(r) + ", column " +
                                 std::to_string(c));
      }
      m(r, c) = v;
    }
  }
  return m;
}

// Index of the entry of largest magnitude (first one on ties).
int64_t argmax_abs(const double* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (std::fabs(v[i]) > std::fabs(v[best])) best = i;
  }
  return best;
}

}  // namespace

Svd thin_svd(const float* x, int64_t rows, int64_t cols) {
  require_shape(rows, cols, "thin_svd");
  const RowMatrix m = to_double(x, rows, cols, "thin_svd");
  // BDCSVD falls back to one-sided Jacobi for small matrices and is accurate to working
  // precision for the leading triplets; both are deterministic.
  Eigen::BDCSVD<Eigen::MatrixXd> svd(m, Eigen::ComputeThinU | Eigen::ComputeThinV);
  Svd out;
  out.rows = rows;
  out.cols = cols;
  out.rank = std::min(rows, cols);
  out.sigma.resize(out.rank);
  out.left.assign(out.rank * rows, 0.0);
  out.right.assign(out.rank * cols, 0.0);
  const auto& s = svd.singularValues();
  const auto& u = svd.matrixU();
  const auto& v = svd.matrixV();
  for (int64_t i = 0; i < out.rank; ++i) {
    out.sigma[i] = s(i);
    double* left = &out.left[i * rows];
    double* right = &out.right[i * cols];
    for (int64_t r = 0; r < rows; ++r) left[r] = u(r, i);
    for (int64_t c = 0; c < cols; ++c) right[c] = v(c, i);
    if (right[argmax_abs(right, cols)] < 0) {
      for (int64_t r = 0; r < rows; ++r) left[r] = -left[r];
      for (int64_t c = 0; c < cols; ++c) right[c] = -right[c];
    }
  }
  return out;
}

SymmetricEigen symmetric_eigen(const double* a, int64_t n) {
  require_shape(n, n, "symmetric_eigen");
  Eigen::MatrixXd m(n, n);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c <= r; ++c) {
      const double v = a[r * n + c];
      if (!std::isfinite(v)) {
        throw std::runtime_error("symmetric_eigen: non-finite value at row " + std::to_string(r) + ", column " +
                                 std::to_string(c));
      }
      m(r, c) = v;
      m(c, r) = v;
    }
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(m);
  if (solver.info() != Eigen::Success) {
    throw std::runtime_error("symmetric_eigen: Eigen's solver did not converge");
  }
  // Eigen returns ascending eigenvalues; reverse to descending.
  SymmetricEigen out;
  out.n = n;
  out.values.resize(n);
  out.vectors.resize(n * n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = n - 1 - i;
    out.values[i] = solver.eigenvalues()(src);
    double* vec = &out.vectors[i * n];
    for (int64_t c = 0; c < n; ++c) vec[c] = solver.eigenvectors()(c, src);
    if (vec[argmax_abs(vec, n)] < 0) {
      for (int64_t c = 0; c < n; ++c) vec[c] = -vec[c];
    }
  }
  return out;
}

Pca pca(const float* x, int64_t rows, int64_t cols, bool center) {
  require_shape(rows, cols, "pca");
  RowMatrix m = to_double(x, rows, cols, "pca");
  Pca out;
  out.dim = cols;
  out.mean.assign(cols, 0.0);
  if (center) {
    const Eigen::RowVectorXd mean = m.colwise().mean();
    for (int64_t c = 0; c < cols; ++c) out.mean[c] = mean(c);
    m.rowwise() -= mean;
  }
  const Eigen::MatrixXd cov = (m.transpose() * m) / static_cast<double>(rows);
  std::vector<double> cov_rows(cols * cols);
  for (int64_t r = 0; r < cols; ++r) {
    for (int64_t c = 0; c < cols; ++c) cov_rows[r * cols + c] = cov(r, c);
  }
  SymmetricEigen eig = symmetric_eigen(cov_rows.data(), cols);
  out.variance = std::move(eig.values);
  // Round-off can leave tiny negative variances on rank-deficient data.
  for (double& v : out.variance) v = std::max(v, 0.0);
  out.components = std::move(eig.vectors);
  return out;
}

int64_t energy_rank_of(const std::vector<double>& v, double threshold) {
  threshold = std::clamp(threshold, 0.0, 1.0);
  double total = 0.0;
  for (double e : v) total += e;
  if (total <= 0.0 || threshold == 0.0) return 0;
  double acc = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    acc += v[i];
    if (acc >= threshold * total) return static_cast<int64_t>(i + 1);
  }
  return static_cast<int64_t>(v.size());
}

}  // namespace veloxquant::linalg
