#include "veloxquant/core/rotation.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <string>

#include "base/error.h"
#include "veloxquant/core/hadamard.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/core/simd_kernels.h"

namespace veloxquant::core {
namespace {

constexpr uint64_t kRotationStream = 1;  // derive_seed purpose: rotation draws

void check_dim(int dim) {
  if (dim <= 0) throw base::InvalidArgument("Rotation: dimension must be positive, got " + std::to_string(dim));
  if (dim > 65536) throw base::InvalidArgument("Rotation: dimension " + std::to_string(dim) + " exceeds 65536");
}

std::vector<float>& scratch(std::size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

}  // namespace

bool Rotation::hadamard_supported(int dim) { return hadamard_factor_of(dim) != 0; }

Rotation::Rotation(int dim, uint64_t seed)
    : Rotation(dim, seed, hadamard_supported(dim) ? RotationKind::kHadamard : RotationKind::kHaar) {}

Rotation::Rotation(int dim, uint64_t seed, RotationKind kind) : dim_(dim), kind_(kind) {
  check_dim(dim);
  Rng rng(derive_seed(seed, kRotationStream));
  const auto d = static_cast<std::size_t>(dim);
  if (kind == RotationKind::kHadamard) {
    factor_ = hadamard_factor_of(dim);
    if (factor_ == 0) {
      throw base::InvalidArgument(
          "Rotation: Hadamard needs d = m * 2^k with m in {1, 12, 20, 28} "
          "(bare 12, 20, 28 excluded), got d = " +
          std::to_string(dim));
    }
    signs_.resize(d);
    for (auto& s : signs_) s = static_cast<float>(rng.sign());
    return;
  }
  // Haar: modified Gram-Schmidt on the columns of a Gaussian matrix, in double. MGS yields
  // R with a positive diagonal, the normalisation under which Q is Haar-distributed.
  std::vector<double> g(d * d);
  for (auto& v : g) v = rng.normal();  // row-major G[i][j]
  std::vector<double> q(d * d);        // column-major: column j at q[j*d]
  for (std::size_t j = 0; j < d; ++j)
    for (std::size_t i = 0; i < d; ++i) q[j * d + i] = g[i * d + j];
  for (std::size_t j = 0; j < d; ++j) {
    double* col = &q[j * d];
    for (std::size_t k = 0; k < j; ++k) {
      const double* prev = &q[k * d];
      double proj = 0.0;
      for (std::size_t i = 0; i < d; ++i) proj += prev[i] * col[i];
      for (std::size_t i = 0; i < d; ++i) col[i] -= proj * prev[i];
    }
    double norm = 0.0;
    for (std::size_t i = 0; i < d; ++i) norm += col[i] * col[i];
    norm = std::sqrt(norm);
    for (std::size_t i = 0; i < d; ++i) col[i] /= norm;
  }
  haar_.resize(d * d);
  haar_t_.resize(d * d);
  for (std::size_t i = 0; i < d; ++i)
    for (std::size_t j = 0; j < d; ++j) {
      haar_[i * d + j] = static_cast<float>(q[j * d + i]);
      haar_t_[j * d + i] = haar_[i * d + j];
    }
}

void Rotation::forward(const float* x, float* y) const {
  const auto d = static_cast<std::size_t>(dim_);
  if (kind_ == RotationKind::kHadamard) {
    std::vector<float>& buf = scratch(d);
    simd::multiply(x, signs_.data(), y, d);
    hadamard_transform(y, factor_, d / static_cast<std::size_t>(factor_), false, buf.data());
    simd::scale(y, 1.0f / std::sqrt(static_cast<float>(dim_)), d);
    return;
  }
  std::vector<float>& buf = scratch(d);
  std::memcpy(buf.data(), x, d * sizeof(float));
  for (std::size_t i = 0; i < d; ++i) y[i] = simd::dot(&haar_[i * d], buf.data(), d);
}

void Rotation::inverse(const float* y, float* x) const {
  const auto d = static_cast<std::size_t>(dim_);
  if (kind_ == RotationKind::kHadamard) {
    std::vector<float>& buf = scratch(d);
    if (x != y) std::memcpy(x, y, d * sizeof(float));
    hadamard_transform(x, factor_, d / static_cast<std::size_t>(factor_), true, buf.data());
    simd::scale(x, 1.0f / std::sqrt(static_cast<float>(dim_)), d);
    simd::multiply(x, signs_.data(), x, d);
    return;
  }
  std::vector<float>& buf = scratch(d);
  std::memcpy(buf.data(), y, d * sizeof(float));
  for (std::size_t i = 0; i < d; ++i) x[i] = simd::dot(&haar_t_[i * d], buf.data(), d);
}

std::vector<float> Rotation::matrix() const {
  const auto d = static_cast<std::size_t>(dim_);
  std::vector<float> m(d * d), e(d), col(d);
  for (std::size_t j = 0; j < d; ++j) {
    std::fill(e.begin(), e.end(), 0.0f);
    e[j] = 1.0f;
    forward(e.data(), col.data());
    for (std::size_t i = 0; i < d; ++i) m[i * d + j] = col[i];
  }
  return m;
}

}  // namespace veloxquant::core
