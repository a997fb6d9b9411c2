#pragma once
// spectral (SpectralQuant, "3% Is All You Need: Breaking TurboQuant's Compression Limit via
// Spectral Structure", 2026; spec §6 #7), standalone. Keys of a trained model are far from
// isotropic: a few principal directions carry most of their energy. So:
//   1. calibration — the first `spectral_calib_tokens` keys are held in f32; then the
//      eigenvectors of their second-moment matrix (1/n) sum k k^T (uncentered: we need inner
//      products, not variance) give an orthonormal basis P, strongest direction first;
//   2. each key y = P k is split into the `spectral_key_d_eff` signal coordinates, stored int8
//      with a per-token f16 scale, and the remaining "noise" coordinates, which are randomly
//      rotated (so every coordinate follows the same density), unit-normalised (f16 norm) and
//      quantized with a b-bit Lloyd-Max codebook;
//   3. with `spectral_apply_qjl` the noise residual gets a 1-bit QJL sketch (m = jl_dim or the
//      noise dimension; f16 residual norm), making the noise inner product unbiased.
// Before calibration completes the held keys are scored exactly. reset() keeps the basis.
#include <memory>
#include <optional>
#include <vector>

#include "veloxquant/caches/standalone_cache_base.h"
#include "veloxquant/core/lloyd_max.h"
#include "veloxquant/core/rotation.h"

namespace veloxquant {

class SpectralCache : public StandaloneCacheBase {
 public:
  explicit SpectralCache(const KVCacheConfig& config);

  bool calibrated() const { return calibrated_; }
  // Row i = i-th principal direction (d x d, row-major), strongest first; empty before calibration.
  const std::vector<float>& basis() const { return basis_; }
  const std::vector<double>& eigenvalues() const { return eigenvalues_; }
  int signal_dims() const { return d_eff_; }
  void reset() override;

  // Bytes of one calibrated key slot: (d_eff + 2) + (2 + ceil(dn*b/8)) + QJL (ceil(m/8) + 2).
  static std::size_t key_bytes(const KVCacheConfig& config);

 protected:
  void encode_key(const float* key, int64_t slot) override;
  void score_keys(const float* query, const std::vector<SlotRange>& ranges, float* out) const override;
  std::size_t extra_bytes() const override;

 private:
  void calibrate();
  void encode_calibrated(const float* key, int64_t slot);
  std::vector<float> prepare_query(const float* query) const;
  float score(const std::vector<float>& prepared, int64_t slot) const;

  int d_eff_, dn_, bits_, m_;
  bool qjl_;
  int64_t calib_tokens_;
  bool calibrated_ = false;
  std::vector<float> staged_;  // keys held before calibration, [n][d]
  std::vector<float> basis_;   // d x d
  std::vector<double> eigenvalues_;
  std::optional<core::Rotation> noise_rotation_;
  const core::Codebook* codebook_ = nullptr;
  std::vector<float> jl_;  // m x dn, N(0, 1)
};

std::unique_ptr<StandaloneCache> make_spectral_cache(const KVCacheConfig& config);

// Eigen-decomposition of a symmetric n x n matrix (row-major, doubles) by cyclic Jacobi
// rotations: eigenvalues descending, eigenvectors as rows. Exposed for tests.
void symmetric_eigen(std::vector<double> matrix, int n, std::vector<double>& eigenvalues,
                     std::vector<double>& eigenvectors);

}  // namespace veloxquant
