#pragma once
// rabitq: RaBitQ (Gao & Long, arXiv 2405.12497, SIGMOD 2024) and its multi-bit extension
// (Gao et al., arXiv 2409.09913).
//
// 1 bit: o = x / ||x||; r = Pi o; the code is the vertex o_bar = sign(r) / sqrt(d) of the
// hypercube, stored as d sign bits, with ||x|| and <o_bar, o> = sum|r_i| / sqrt(d) in fp32.
// Unbiased estimator: <q, x> ~ ||x|| * <o_bar, Pi q> / <o_bar, o>. For a random o at d = 128,
// E<o_bar, o> -> sqrt(2/pi) = 0.798 (anchors §1.4: 0.800 measured).
//
// B bits (2..8): the codebook is the grid of half-integers {-(2^B-1)/2, ..., (2^B-1)/2}^d up
// to scale; y is the grid point whose direction is closest to r (largest cosine). It is found
// exactly: with a_i = |r_i| and y_i(t) = min(floor(t a_i) + 1/2, 2^(B-1) - 1/2), the cosine
// only changes at the critical scales t = k / a_i, so one sweep over the d (2^(B-1) - 1)
// sorted events with running sums S = sum y_i a_i, Q = sum y_i^2 visits every candidate.
// o_bar = y / ||y||; the same estimator, with <o_bar, o> = S / sqrt(Q).
//
// decode() returns the MSE-optimal point on the o_bar direction, ||x|| <o_bar, o> Pi^T o_bar
// (error 1 - <o_bar, o>^2); score() is the unbiased estimator = <q, decode(x)> / <o_bar, o>^2.
// Code: 1 bit: ceil(d/8) sign bytes + f32 norm + f32 <o_bar, o>;
//       B bits: ceil(d B / 8) dense level indices + f32 norm + f32 <o_bar, o> + f32 1/||y||.
#include <vector>

#include "veloxquant/core/rotation.h"
#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

class RaBitQ final : public Quantizer {
 public:
  RaBitQ(int dim, int bits, uint64_t seed);

  std::string method() const override { return "rabitq"; }
  int dim() const override { return dim_; }
  int bits() const override { return bits_; }
  std::size_t code_bytes() const override { return index_bytes_ + (bits_ == 1 ? 8 : 12); }
  void encode(const float* x, std::size_t n, uint8_t* codes) const override;
  void decode(const uint8_t* codes, std::size_t n, float* out) const override;
  PreparedQuery prepare_query(const float* query) const override;
  void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const override;
  // <o_bar, o> stored in a code (the quality factor the papers analyse).
  float alignment(const uint8_t* code) const;

  // The grid point of largest cosine with `r` (exact sweep); writes the signed half-integer
  // levels y and returns that cosine. Exposed for tests (checked against brute force).
  static double best_grid_point(const float* r, std::size_t d, int bits, std::vector<float>& y);

 private:
  // Grid coordinate of level index u: u - (2^B - 1)/2 (B = 1: -1/sqrt d, +1/sqrt d).
  float level_value(unsigned u) const;

  int dim_, bits_;
  std::size_t index_bytes_;
  std::vector<float> levels_;
  core::Rotation rotation_;
};

}  // namespace veloxquant::quant
