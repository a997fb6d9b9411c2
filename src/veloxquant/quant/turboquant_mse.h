#pragma once
// turboquant_mse: TurboQuant's MSE-optimal quantizer (Zandieh et al., arXiv 2504.19874,
// Algorithm 1). x = norm * u; r = Pi u; every coordinate of r is quantized on its own with
// the b-bit Lloyd-Max codebook of the rotated-coordinate density (N(0, 1/d) from d = 64, the
// exact Beta-type density below). The norm is stored in bf16.
//   x_hat = norm * Pi^T c[idx];  E||u - u_hat||^2 = D_mse(b) = 0.3634, 0.1175, 0.0345, 0.0095.
// Inner products through x_hat are biased: E<y, x_hat> = (1 - D_mse(b)) <y, x> (anchors §1.1).
// Code: ceil(d * b / 8) bytes of dense-packed indices + 2 bytes bf16 norm.
#include "veloxquant/core/lloyd_max.h"
#include "veloxquant/core/rotation.h"
#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

class TurboQuantMse final : public Quantizer {
 public:
  TurboQuantMse(int dim, int bits, uint64_t seed);

  std::string method() const override { return "turboquant_mse"; }
  int dim() const override { return dim_; }
  int bits() const override { return bits_; }
  std::size_t code_bytes() const override { return index_bytes_ + 2; }
  void encode(const float* x, std::size_t n, uint8_t* codes) const override;
  void decode(const uint8_t* codes, std::size_t n, float* out) const override;
  PreparedQuery prepare_query(const float* query) const override;
  void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const override;

  // The pieces turboquant_prod reuses: the rotated, unit-normalised vector and its indices.
  // Returns the norm; writes r = Pi (x / norm) and the dense-packed indices.
  float encode_rotated(const float* x, float* rotated, uint8_t* packed) const;
  // sum_j q_rot[j] * c[idx_j] for one packed index row (byte LUT when b in {1, 2, 4, 8}).
  float score_indices(const PreparedQuery& query, const uint8_t* packed) const;
  void fill_lut(PreparedQuery& query) const;
  const core::Rotation& rotation() const { return rotation_; }
  const core::Codebook& codebook() const { return *codebook_; }
  std::size_t index_bytes() const { return index_bytes_; }

 private:
  int dim_;
  int bits_;
  std::size_t index_bytes_;
  core::Rotation rotation_;
  const core::Codebook* codebook_;
};

}  // namespace veloxquant::quant
