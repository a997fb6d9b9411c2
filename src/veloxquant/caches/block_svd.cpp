#include "veloxquant/caches/block_svd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "veloxquant/core/linalg.h"

namespace veloxquant {

namespace {

// Eigen-decomposition of the symmetric n x n matrix a (row-major, destroyed) by cyclic Jacobi:
// eigenvalues on the diagonal of a, eigenvectors in the columns of v.
void jacobi_eigen(std::vector<double>& a, int64_t n, std::vector<double>& v) {
  v.assign(static_cast<std::size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i * n + i)] = 1.0;
  auto at = [&](int64_t i, int64_t j) -> double& { return a[static_cast<std::size_t>(i * n + j)]; };
  double total = 0.0;
  for (double x : a) total += x * x;
  // Converged once the off-diagonal mass is at rounding level of the whole; 60 sweeps is far
  // beyond what quadratic convergence needs for these sizes (it only bounds a pathological case).
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j) off += at(i, j) * at(i, j);
    }
    if (off <= 1e-30 * total || off == 0.0) break;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = at(p, q);
        if (std::fabs(apq) <= 1e-300) continue;
        // The rotation that zeroes a[p][q] (Golub & Van Loan, Algorithm 8.4.1: the smaller angle).
        const double theta = (at(q, q) - at(p, p)) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          double& vkp = v[static_cast<std::size_t>(k * n + p)];
          double& vkq = v[static_cast<std::size_t>(k * n + q)];
          const double x = vkp, y = vkq;
          vkp = c * x - s * y;
          vkq = s * x + c * y;
        }
      }
    }
  }
}

}  // namespace

BlockSvd block_svd(const float* x, int64_t rows, int64_t cols, GramSolver solver, int64_t vectors) {
  BlockSvd out;
  out.rows = rows;
  out.cols = cols;
  const bool by_rows = rows <= cols;  // diagonalise the shorter side's Gram matrix
  const int64_t n = by_rows ? rows : cols, m = by_rows ? cols : rows;
  // The block in double with the short side first (element (i, k) at xs[i * m + k]), once: the
  // products below read it contiguously (the same products and sums, in the same order, as
  // reading x through an index test per element).
  std::vector<double> xs(static_cast<std::size_t>(n * m));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < m; ++k) {
      xs[static_cast<std::size_t>(i * m + k)] = by_rows ? double(x[i * cols + k]) : double(x[k * cols + i]);
    }
  }
  // The Gram matrix: entry (i, j) is sum_k xs[i][k] xs[j][k], summed in k order. Row i's entries
  // accumulate side by side (k outer, j inner, reading the transposed copy xt[k][j]): the same sum
  // for every entry as one dot product at a time, but independent chains the compiler vectorizes,
  // instead of one serial chain of additions per entry.
  std::vector<double> xt(static_cast<std::size_t>(m * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < m; ++k) xt[static_cast<std::size_t>(k * n + i)] = xs[static_cast<std::size_t>(i * m + k)];
  }
  std::vector<double> gram(static_cast<std::size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double* xi = xs.data() + i * m;
    double* gi = gram.data() + i * n;
    for (int64_t k = 0; k < m; ++k) {
      const double a = xi[k];
      const double* tk = xt.data() + k * n;
      for (int64_t j = i; j < n; ++j) gi[j] += a * tk[j];
    }
    for (int64_t j = i + 1; j < n; ++j) gram[static_cast<std::size_t>(j * n + i)] = gi[j];
  }
  std::vector<double> vecs;
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const bool finite = std::all_of(gram.begin(), gram.end(), [](double g) { return std::isfinite(g); });
  if (solver == GramSolver::kTridiagonal && finite) {
    // Eigenvalues descending, eigenvector i in row i: laid out as Jacobi leaves them (eigenvalue e
    // on the diagonal, its vector in column e), already in order.
    const linalg::SymmetricEigen eig = linalg::symmetric_eigen(gram.data(), n);
    vecs.assign(static_cast<std::size_t>(n * n), 0.0);
    for (int64_t e = 0; e < n; ++e) {
      gram[static_cast<std::size_t>(e * n + e)] = eig.values[static_cast<std::size_t>(e)];
      for (int64_t i = 0; i < n; ++i) {
        vecs[static_cast<std::size_t>(i * n + e)] = eig.vectors[static_cast<std::size_t>(e * n + i)];
      }
    }
  } else {
    jacobi_eigen(gram, n, vecs);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return gram[static_cast<std::size_t>(a * n + a)] > gram[static_cast<std::size_t>(b * n + b)];
    });
  }
  out.sigma.assign(static_cast<std::size_t>(n), 0.0);
  out.left.assign(static_cast<std::size_t>(n * rows), 0.0);
  out.right.assign(static_cast<std::size_t>(n * cols), 0.0);
  // Below this a singular value is rounding noise of the Gram matrix; its vectors are left zero.
  double largest = 0.0;
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, gram[static_cast<std::size_t>(i * n + i)]);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t e = order[static_cast<std::size_t>(r)];
    const double lambda = gram[static_cast<std::size_t>(e * n + e)];
    if (!(lambda > 1e-24 * largest) || lambda <= 0.0) continue;
    const double sigma = std::sqrt(lambda);
    out.sigma[static_cast<std::size_t>(r)] = sigma;
    // Short-side vector from the eigenvectors, long-side vector = X^T u / sigma (or X v / sigma).
    std::vector<double>& short_side = by_rows ? out.left : out.right;
    std::vector<double>& long_side = by_rows ? out.right : out.left;
    if (vectors >= 0 && r >= vectors) continue;  // the caller keeps only the leading triplets
    for (int64_t i = 0; i < n; ++i) {
      short_side[static_cast<std::size_t>(r * n + i)] = vecs[static_cast<std::size_t>(i * n + e)];
    }
    // long[k] = sum_i xs[i][k] vecs[i][e], i ascending, for all k side by side (as the Gram).
    double* out_row = long_side.data() + r * m;
    for (int64_t i = 0; i < n; ++i) {
      const double v = vecs[static_cast<std::size_t>(i * n + e)];
      const double* xi = xs.data() + i * m;
      for (int64_t k = 0; k < m; ++k) out_row[k] += xi[k] * v;
    }
    for (int64_t k = 0; k < m; ++k) out_row[k] /= sigma;
  }
  return out;
}

int64_t energy_rank(const std::vector<double>& sigma, double threshold) {
  double total = 0.0;
  for (double s : sigma) total += s * s;
  if (total <= 0.0) return 0;
  double kept = 0.0;
  for (std::size_t r = 0; r < sigma.size(); ++r) {
    if (kept >= threshold * total) return static_cast<int64_t>(r);
    kept += sigma[r] * sigma[r];
  }
  return static_cast<int64_t>(sigma.size());
}

}  // namespace veloxquant
