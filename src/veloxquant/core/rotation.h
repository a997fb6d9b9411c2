#pragma once
// Random rotations Pi of R^d (orthonormal, seeded). A rotated unit vector has coordinates
// that follow one known density, which is what lets one scalar codebook serve every
// coordinate (TurboQuant, arXiv 2504.19874 §3; the original's math/rotation.py).
//
//   Hadamard: Pi = H_d * D / sqrt(d), D a +-1 diagonal drawn from the seed, H_d = H_m (x)
//             H_{2^k} (hadamard.h). O(d log d) per vector; for d = m * 2^k, m in {1,12,20,28}.
//   Haar:     Pi = Q from the QR decomposition of a d x d standard-normal matrix (with the
//             sign convention diag(R) > 0 that makes Q exactly Haar-distributed). O(d^2).
// forward(x) = Pi x, inverse(y) = Pi^T y.
#include <cstdint>
#include <vector>

namespace veloxquant::core {

enum class RotationKind { kHadamard, kHaar };

class Rotation {
 public:
  // Picks Hadamard when d allows it, Haar otherwise (the original's rule).
  Rotation(int dim, uint64_t seed);
  // Forces a kind; kHadamard for an unsupported d throws base::InvalidArgument naming d.
  Rotation(int dim, uint64_t seed, RotationKind kind);

  static bool hadamard_supported(int dim);

  int dim() const { return dim_; }
  RotationKind kind() const { return kind_; }
  const char* kind_name() const { return kind_ == RotationKind::kHadamard ? "hadamard" : "haar"; }

  // y = Pi x and x = Pi^T y. Input and output may be the same buffer. Thread-safe.
  void forward(const float* x, float* y) const;
  void inverse(const float* y, float* x) const;

  // The dense d x d matrix Pi, row-major (tests and diagnostics only).
  std::vector<float> matrix() const;

 private:
  int dim_;
  RotationKind kind_;
  int factor_ = 1;             // Hadamard: the m of d = m * 2^k
  std::vector<float> signs_;   // Hadamard: the +-1 diagonal
  std::vector<float> haar_;    // Haar: Pi row-major
  std::vector<float> haar_t_;  // Haar: Pi^T row-major (so both directions stream rows)
};

}  // namespace veloxquant::core
