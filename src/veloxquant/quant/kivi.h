#pragma once
// kivi: KIVI's asymmetric group quantization (Liu et al., arXiv 2402.02750) as a per-vector
// quantizer: one vector (a value row, "per token") is split into groups of `group` channels
// (default 32), each with an fp16 scale and minimum (core/group_quant.h has the rule and the
// per-channel layout the KIVI cache uses for keys). No rotation; the query is used as is.
// Code: ceil(d * b / 8) bytes of dense-packed codes + 4 bytes per group
// (d = 128, b = 2: 32 + 16 = 48 bytes = 3.0 bits per element, anchors §1.3).
// Scoring from codes: <q, x_hat> = sum_g scale_g * sum_{j in g} q_j code_j + min_g * sum_{j in g} q_j,
// the per-group query sums prepared once.
#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

class Kivi final : public Quantizer {
 public:
  Kivi(int dim, int bits, uint64_t seed, int group = 32);

  std::string method() const override { return "kivi"; }
  int dim() const override { return dim_; }
  int bits() const override { return bits_; }
  int group() const { return group_; }
  std::size_t code_bytes() const override { return code_index_bytes_ + 4 * groups_; }
  void encode(const float* x, std::size_t n, uint8_t* codes) const override;
  void decode(const uint8_t* codes, std::size_t n, float* out) const override;
  PreparedQuery prepare_query(const float* query) const override;
  void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const override;

 private:
  int dim_, bits_, group_;
  std::size_t groups_;
  std::size_t code_index_bytes_;
};

}  // namespace veloxquant::quant
