#include "veloxquant/eviction/leverage_scores.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace veloxquant::eviction {

namespace {

// One implicit symmetric QR step with Wilkinson shift on the unreduced tridiagonal block [l, m]
// (diagonal d, off-diagonal e[i] between i and i + 1), the rotations accumulated into the
// columns of q (n x n, row-major): T <- G T G^T, q <- q G^T (Golub & Van Loan, Alg. 8.3.2).
void qr_step(std::vector<double>& d, std::vector<double>& e, std::vector<double>& q, int n, int l, int m) {
  const double delta = (d[static_cast<std::size_t>(m - 1)] - d[static_cast<std::size_t>(m)]) / 2.0;
  const double b = e[static_cast<std::size_t>(m - 1)];
  const double root = std::hypot(delta, b);
  const double mu = d[static_cast<std::size_t>(m)] - b * b / (delta + (delta >= 0 ? root : -root));
  double x = d[static_cast<std::size_t>(l)] - mu, z = e[static_cast<std::size_t>(l)];
  for (int k = l; k < m; ++k) {
    const double r = std::hypot(x, z);
    const double c = r == 0 ? 1.0 : x / r, s = r == 0 ? 0.0 : z / r;
    if (k > l) e[static_cast<std::size_t>(k - 1)] = r;  // the rotation folds the bulge into it
    const std::size_t k0 = static_cast<std::size_t>(k), k1 = k0 + 1;
    const double a = d[k0], off = e[k0], dd = d[k1];
    d[k0] = c * c * a + 2.0 * c * s * off + s * s * dd;
    d[k1] = s * s * a - 2.0 * c * s * off + c * c * dd;
    e[k0] = c * s * (dd - a) + (c * c - s * s) * off;
    if (k + 1 < m) {  // the bulge below the subdiagonal, chased by the next rotation
      z = s * e[k1];
      e[k1] *= c;
      x = e[k0];
    }
    for (int i = 0; i < n; ++i) {
      double& qa = q[static_cast<std::size_t>(i) * n + k0];
      double& qb = q[static_cast<std::size_t>(i) * n + k1];
      const double u = qa, v = qb;
      qa = c * u + s * v;
      qb = -s * u + c * v;
    }
  }
}

}  // namespace

void symmetric_eigen_descending(std::vector<double> a, int n, std::vector<double>& eigenvalues,
                                std::vector<double>& eigenvectors) {
  const std::size_t nn = static_cast<std::size_t>(n);
  auto at = [&](int r, int c) -> double& { return a[static_cast<std::size_t>(r) * nn + static_cast<std::size_t>(c)]; };
  std::vector<double> q(nn * nn, 0.0);
  for (int i = 0; i < n; ++i) q[static_cast<std::size_t>(i) * nn + static_cast<std::size_t>(i)] = 1.0;
  // Householder reduction: reflector k zeroes column k below the subdiagonal; the trailing block
  // B becomes H B H = B - v w^T - w v^T with p = B v, w = 2 p - 2 (v.p) v (v a unit vector).
  std::vector<double> v(nn), p(nn), w(nn);
  for (int k = 0; k + 2 < n; ++k) {
    double norm2 = 0.0;
    for (int i = k + 1; i < n; ++i) norm2 += at(i, k) * at(i, k);
    if (norm2 == 0.0) continue;
    const double norm = std::sqrt(norm2);
    const double alpha = at(k + 1, k) > 0 ? -norm : norm;  // no cancellation in v[k + 1]
    double v2 = 0.0;
    for (int i = k + 1; i < n; ++i) v[static_cast<std::size_t>(i)] = at(i, k);
    v[static_cast<std::size_t>(k + 1)] -= alpha;
    for (int i = k + 1; i < n; ++i) v2 += v[static_cast<std::size_t>(i)] * v[static_cast<std::size_t>(i)];
    const double inv = 1.0 / std::sqrt(v2);
    for (int i = k + 1; i < n; ++i) v[static_cast<std::size_t>(i)] *= inv;
    at(k + 1, k) = at(k, k + 1) = alpha;
    for (int i = k + 2; i < n; ++i) at(i, k) = at(k, i) = 0.0;
    double vp = 0.0;
    for (int i = k + 1; i < n; ++i) {
      double sum = 0.0;
      for (int j = k + 1; j < n; ++j) sum += at(i, j) * v[static_cast<std::size_t>(j)];
      p[static_cast<std::size_t>(i)] = sum;
      vp += v[static_cast<std::size_t>(i)] * sum;
    }
    for (int i = k + 1; i < n; ++i) w[static_cast<std::size_t>(i)] = 2.0 * p[static_cast<std::size_t>(i)] - 2.0 * vp * v[static_cast<std::size_t>(i)];
    for (int i = k + 1; i < n; ++i) {
      for (int j = k + 1; j < n; ++j) {
        at(i, j) -= v[static_cast<std::size_t>(i)] * w[static_cast<std::size_t>(j)] + w[static_cast<std::size_t>(i)] * v[static_cast<std::size_t>(j)];
      }
    }
    for (int r = 0; r < n; ++r) {  // q <- q H
      double* row = q.data() + static_cast<std::size_t>(r) * nn;
      double t = 0.0;
      for (int j = k + 1; j < n; ++j) t += row[j] * v[static_cast<std::size_t>(j)];
      for (int j = k + 1; j < n; ++j) row[j] -= 2.0 * t * v[static_cast<std::size_t>(j)];
    }
  }
  std::vector<double> d(nn), e(nn, 0.0);
  for (int i = 0; i < n; ++i) d[static_cast<std::size_t>(i)] = at(i, i);
  for (int i = 0; i + 1 < n; ++i) e[static_cast<std::size_t>(i)] = at(i + 1, i);
  // QR steps on the bottom unreduced block until every off-diagonal is negligible.
  const double eps = std::numeric_limits<double>::epsilon();
  int m = n - 1, steps = 0;
  while (m > 0 && steps < 60 * n) {
    const auto negligible = [&](int i) {
      return std::fabs(e[static_cast<std::size_t>(i)]) <=
             eps * (std::fabs(d[static_cast<std::size_t>(i)]) + std::fabs(d[static_cast<std::size_t>(i + 1)]));
    };
    if (negligible(m - 1)) {
      e[static_cast<std::size_t>(m - 1)] = 0.0;
      --m;
      continue;
    }
    int l = m - 1;
    while (l > 0 && !negligible(l - 1)) --l;
    qr_step(d, e, q, n, l, m);
    ++steps;
  }
  std::vector<int> order(nn);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return d[static_cast<std::size_t>(i)] > d[static_cast<std::size_t>(j)]; });
  eigenvalues.resize(nn);
  eigenvectors.resize(nn * nn);
  for (int r = 0; r < n; ++r) {
    const int col = order[static_cast<std::size_t>(r)];
    eigenvalues[static_cast<std::size_t>(r)] = d[static_cast<std::size_t>(col)];
    for (int i = 0; i < n; ++i) {
      eigenvectors[static_cast<std::size_t>(r) * nn + static_cast<std::size_t>(i)] = q[static_cast<std::size_t>(i) * nn + static_cast<std::size_t>(col)];
    }
  }
}

void value_leverage_scores(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                           int64_t rank_cap, float* out) {
  if (count <= 0) return;
  thread_local std::vector<double> block, gram, eigenvalues, eigenvectors;
  block.resize(static_cast<std::size_t>(count * dim));
  double total = 0.0;
  for (int64_t j = 0; j < count; ++j) {
    const float* v = values + (rows ? rows[j] : j) * dim;
    double* m = block.data() + j * dim;
    for (int64_t i = 0; i < dim; ++i) {
      m[i] = double(weights[j]) * v[i];
      total += m[i] * m[i];
    }
  }
  if (total == 0.0) {
    std::fill_n(out, count, 0.0f);
    return;
  }
  const int64_t k = std::max<int64_t>(1, std::min({rank_cap, count, dim}));
  std::vector<double> score(static_cast<std::size_t>(count), 0.0);
  if (k >= count || k >= dim) {
    // The top k directions span every row: the whole row counts.
    for (int64_t j = 0; j < count; ++j) {
      const double* m = block.data() + j * dim;
      for (int64_t i = 0; i < dim; ++i) score[static_cast<std::size_t>(j)] += m[i] * m[i];
    }
  } else {
    gram.assign(static_cast<std::size_t>(dim * dim), 0.0);
    for (int64_t j = 0; j < count; ++j) {
      const double* m = block.data() + j * dim;
      for (int64_t r = 0; r < dim; ++r) {
        const double mr = m[r];
        double* g = gram.data() + r * dim;
        for (int64_t c = r; c < dim; ++c) g[c] += mr * m[c];
      }
    }
    for (int64_t r = 0; r < dim; ++r) {
      for (int64_t c = 0; c < r; ++c) gram[static_cast<std::size_t>(r * dim + c)] = gram[static_cast<std::size_t>(c * dim + r)];
    }
    symmetric_eigen_descending(gram, static_cast<int>(dim), eigenvalues, eigenvectors);
    for (int64_t j = 0; j < count; ++j) {
      const double* m = block.data() + j * dim;
      double sum = 0.0;
      for (int64_t t = 0; t < k; ++t) {
        const double* u = eigenvectors.data() + t * dim;
        double dot = 0.0;
        for (int64_t i = 0; i < dim; ++i) dot += m[i] * u[i];
        sum += dot * dot;
      }
      score[static_cast<std::size_t>(j)] = sum;
    }
  }
  // sum_j <m_j, u_t>^2 = s_t^2: dividing by the total is the original's energy weighting and its
  // final normalisation in one.
  double sum = 0.0;
  for (double s : score) sum += s;
  for (int64_t j = 0; j < count; ++j) out[j] = sum > 0 ? static_cast<float>(score[static_cast<std::size_t>(j)] / sum) : 0.0f;
}

}  // namespace veloxquant::eviction
