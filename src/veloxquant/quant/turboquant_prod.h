#pragma once
// turboquant_prod: TurboQuant's unbiased inner-product quantizer (arXiv 2504.19874,
// Algorithm 2). b_mse = max(b - 1, 1) bits of turboquant_mse, then a 1-bit QJL sketch of the
// residual with its norm:
//   u = x / ||x||, r = Pi u - c[idx] (the residual, in rotated space), gamma = ||r||,
//   signs = sign(S r), S an m x d i.i.d. N(0,1) matrix (m = jl_dim, default d).
//   est = ||x|| * ( <Pi q, c[idx]> + gamma * sqrt(pi/2)/m * <S Pi q, signs> ).
// Unbiased (Theorem 2); Var = ||x||^2 [(pi/2) ||r||^2 ||q||^2 - <r, Pi q>^2] / m.
// Sketching the residual in rotated space is the paper's S applied to Pi^T r: S Pi^T is
// again an i.i.d. Gaussian matrix, so the estimator's law is the same and one rotation is saved.
// Code: ceil(d * b_mse / 8) index bytes + ceil(m / 8) sign bytes + bf16 norm + fp16 gamma
// (gamma <= ||u|| = 1, where fp16 has 3 more mantissa bits than bf16).
#include "veloxquant/quant/qjl.h"
#include "veloxquant/quant/turboquant_mse.h"

namespace veloxquant::quant {

class TurboQuantProd final : public Quantizer {
 public:
  TurboQuantProd(int dim, int bits, uint64_t seed, int jl_dim = 0);

  std::string method() const override { return "turboquant_prod"; }
  int dim() const override { return mse_.dim(); }
  int bits() const override { return bits_; }
  int mse_bits() const { return mse_.bits(); }
  int jl_dim() const { return sketch_.m(); }
  std::size_t code_bytes() const override { return mse_.index_bytes() + sketch_.sign_bytes() + 4; }
  void encode(const float* x, std::size_t n, uint8_t* codes) const override;
  void decode(const uint8_t* codes, std::size_t n, float* out) const override;
  PreparedQuery prepare_query(const float* query) const override;
  void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const override;

 private:
  int bits_;
  TurboQuantMse mse_;
  SignSketch sketch_;
};

}  // namespace veloxquant::quant
