#pragma once
// rabitq: RaBitQ (Gao & Long, arXiv 2405.12497, SIGMOD 2024), 1 bit per dimension.
// o = x / ||x||; r = Pi o; the code is the vertex o_bar = sign(r) / sqrt(d) of the hypercube,
// stored as d sign bits, with ||x|| and <o_bar, o> = sum|r_i| / sqrt(d) kept in fp32.
// Unbiased estimator: <q, x> ~ ||x|| * <o_bar, Pi q> / <o_bar, o>. For a random o at d = 128,
// E<o_bar, o> -> sqrt(2/pi) = 0.798 (anchors §1.4: 0.800 measured).
// decode() returns the MSE-optimal reconstruction on that vertex, ||x|| <o_bar, o> Pi^T o_bar
// (error 1 - <o_bar, o>^2 ~ 0.36, like 1-bit TurboQuant); score() is the unbiased estimator,
// which equals <q, decode(x)> / <o_bar, o>^2.
// Code: ceil(d / 8) sign bytes + 4 bytes norm + 4 bytes <o_bar, o>. Only bits = 1 (the
// multi-bit extension, arXiv 2409.09913, is not implemented).
#include "veloxquant/core/rotation.h"
#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

class RaBitQ final : public Quantizer {
 public:
  RaBitQ(int dim, int bits, uint64_t seed);

  std::string method() const override { return "rabitq"; }
  int dim() const override { return dim_; }
  int bits() const override { return 1; }
  std::size_t code_bytes() const override { return sign_bytes_ + 8; }
  void encode(const float* x, std::size_t n, uint8_t* codes) const override;
  void decode(const uint8_t* codes, std::size_t n, float* out) const override;
  PreparedQuery prepare_query(const float* query) const override;
  void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n,
             float* scores) const override;
  // <o_bar, o> stored in a code (the quality factor the paper analyses).
  float alignment(const uint8_t* code) const;

 private:
  int dim_;
  std::size_t sign_bytes_;
  core::Rotation rotation_;
};

}  // namespace veloxquant::quant
