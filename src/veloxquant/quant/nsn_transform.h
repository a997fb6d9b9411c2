#pragma once
// NSNQuant's per-vector transform and code (arXiv 2505.18231; docs/methods/nsnquant.md): one
// head's rows of width d go through
//
//   r  = H (s . x) / sqrt(d)                 randomized Hadamard rotation (orthonormal, signs s)
//   u  = sqrt(d) r / n1,   n1 = ||r||        Normalize: every token on the sphere of radius sqrt(d)
//   v  = u - mu                              Shift: mu = the chunk's mean of u per channel (f16)
//   z  = sqrt(d) v / n2,   n2 = ||v||        Normalize again: coordinates ~ N(0, 1)
//   codes = residual VQ of z's sub-vectors against the shared synthetic-Gaussian codebook
//
// and come back as r^ = a z^ + b mu with a = n1 n2 / d, b = n1 / sqrt(d) (both f16 per token),
// x^ = s . H^T r^ / sqrt(d). Attention works in the rotated basis: <q, x^> = <Hq', r^> =
// a <q', z^> + b <q', mu> (q' the query rotated the same way), so a key's score is a sum of
// table lookups times a plus one dot product per chunk times b.
//
// The arithmetic is spelled out (float FWHT butterflies, norms and means summed in double in
// index order, products rounded once to float) so that the test's plain reference reproduces the
// codes bit for bit.
#include <cstdint>
#include <memory>
#include <vector>

#include "veloxquant/quant/nsn_codebook.h"

namespace veloxquant::quant {

class NsnTransform {
 public:
  // Throws QuantizerConfigError naming head_dim unless d has a Hadamard matrix (d = m 2^k with
  // m in {1, 12, 20, 28}) and the codebook's sub-vector width divides d.
  NsnTransform(int64_t d, uint64_t seed, std::shared_ptr<const NsnCodebook> codebook);

  int64_t dim() const { return d_; }
  int64_t subvectors() const { return d_ / book_->dim(); }
  // Bytes of codes per row: one per sub-vector per stage, sub-vector-major.
  int64_t codes_per_row() const { return subvectors() * book_->stages(); }
  const NsnCodebook& codebook() const { return *book_; }
  const std::vector<float>& signs() const { return signs_; }

  // r = H (s . x) / sqrt(d), and its inverse x = s . H^T r / sqrt(d) (in place allowed).
  void rotate(const float* x, float* r) const;
  void unrotate(const float* r, float* x) const;
  // Encodes n rows [n, d] (model basis, f32) as one chunk: codes [n, codes_per_row()] (row
  // stride code_stride), per-row f16 (a, b) at scales + j * scale_stride, the chunk's f16 mean.
  void encode_chunk(const float* rows, int64_t n, uint8_t* codes, int64_t code_stride, uint16_t* scales,
                    int64_t scale_stride, uint16_t* mean) const;
  // One row back in the rotated basis, r^ = a z^ + b mu (mean already widened to f32).
  void decode_rotated(const uint8_t* codes, const uint16_t* scales, const float* mean, float* out) const;

 private:
  int64_t d_;
  int m_;  // the Hadamard factor (d = m 2^k)
  float inv_sqrt_d_;
  std::vector<float> signs_;
  std::shared_ptr<const NsnCodebook> book_;
};

}  // namespace veloxquant::quant
