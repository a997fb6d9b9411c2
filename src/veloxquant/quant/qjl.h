#pragma once
// qjl: the Quantized Johnson-Lindenstrauss sketch (Zandieh, Daliri, Han; arXiv 2406.03482).
// Store sign(S k) in {+-1}^m and ||k||, S an m x d matrix of i.i.d. N(0, 1) entries drawn
// from the seed; the query stays unquantized and the asymmetric estimator
//   est = sqrt(pi/2) / m * ||k|| * <S q, sign(S k)>
// is unbiased with Var = [(pi/2) ||q||^2 ||k||^2 - <q,k>^2] / m (anchors §1.2).
// m = jl_dim, default bits * d (the bit width counts sign bits per coordinate; bits = 1 gives
// the original's default m = d). Code: ceil(m / 8) bytes of packed signs + bf16 norm.
// Deviation: the original counts one byte per sign; we pack 8 per byte.
// The sketch helpers are shared with turboquant_prod.
#include <vector>

#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

// An m x d Gaussian sketch with packed-sign encoding and byte-LUT scoring.
class SignSketch {
 public:
  SignSketch(int dim, int m, uint64_t seed);
  int dim() const { return dim_; }
  int m() const { return m_; }
  std::size_t sign_bytes() const { return (static_cast<std::size_t>(m_) + 7) / 8; }
  // Bit i of the output is 1 when (S v)_i >= 0.
  void encode_signs(const float* v, uint8_t* signs) const;
  // s = S q (m floats) and the sign LUT: lut[p*256 + byte] = sum_t (+-1) s[8p + t].
  void prepare(const float* q, std::vector<float>& sketched, std::vector<float>& lut) const;
  // <S q, sign(S v)> from the packed signs.
  float signed_sum(const std::vector<float>& lut, const uint8_t* signs) const;
  // Decoding direction: sqrt(pi/2)/m * S^T sign (the estimator's implied reconstruction).
  void reconstruct(const uint8_t* signs, float* out) const;

 private:
  int dim_, m_;
  std::vector<float> s_;  // row-major m x d
};

class Qjl final : public Quantizer {
 public:
  Qjl(int dim, int bits, uint64_t seed, int jl_dim = 0);

  std::string method() const override { return "qjl"; }
  int dim() const override { return dim_; }
  int bits() const override { return bits_; }
  int jl_dim() const { return sketch_.m(); }
  std::size_t code_bytes() const override { return sketch_.sign_bytes() + 2; }
  void encode(const float* x, std::size_t n, uint8_t* codes) const override;
  void decode(const uint8_t* codes, std::size_t n, float* out) const override;
  PreparedQuery prepare_query(const float* query) const override;
  void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const override;

 private:
  int dim_, bits_;
  SignSketch sketch_;
};

}  // namespace veloxquant::quant
