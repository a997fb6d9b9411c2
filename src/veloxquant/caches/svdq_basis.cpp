#include "veloxquant/caches/svdq_basis.h"

#include <algorithm>
#include <cmath>

#include "veloxquant/caches/block_svd.h"

namespace veloxquant {

SvdqBasis fit_svdq_basis(const float* keys, int64_t n, int64_t dim, std::optional<int> rank, double energy_threshold) {
  const BlockSvd svd = block_svd(keys, n, dim);
  std::vector<std::vector<double>> basis;
  const std::size_t d = static_cast<std::size_t>(dim);
  for (std::size_t i = 0; i < svd.sigma.size(); ++i) {
    if (svd.sigma[i] <= 0.0) continue;
    basis.emplace_back(svd.right.begin() + static_cast<std::ptrdiff_t>(i * d),
                       svd.right.begin() + static_cast<std::ptrdiff_t>((i + 1) * d));
  }
  // Completion: each standard basis vector minus its projection on the directions so far (twice,
  // for orthogonality in floating point), kept when a usable part remains.
  for (std::size_t e = 0; e < d && basis.size() < d; ++e) {
    std::vector<double> v(d, 0.0);
    v[e] = 1.0;
    for (int pass = 0; pass < 2; ++pass) {
      for (const std::vector<double>& u : basis) {
        double dot = 0.0;
        for (std::size_t c = 0; c < d; ++c) dot += u[c] * v[c];
        for (std::size_t c = 0; c < d; ++c) v[c] -= dot * u[c];
      }
    }
    double norm = 0.0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    if (norm < 1e-6) continue;
    for (double& x : v) x /= norm;
    basis.push_back(std::move(v));
  }
  SvdqBasis out;
  out.rows.resize(d * d);
  for (std::size_t i = 0; i < d; ++i) {
    for (std::size_t c = 0; c < d; ++c) out.rows[i * d + c] = static_cast<float>(basis[i][c]);
  }
  out.rank = rank ? std::clamp<int64_t>(*rank, 0, dim) : energy_rank(svd.sigma, energy_threshold);
  return out;
}

}  // namespace veloxquant
