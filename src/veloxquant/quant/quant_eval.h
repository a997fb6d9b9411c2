#pragma once
// The measurement behind `veloxquant quant-eval` (and the quantizer tests that check paper
// numbers through the same code): draw N random unit vectors x (Gaussian, normalised) and
// queries y = 0.6 x + 0.8 z with z a random unit vector orthogonal to x (so <y, x> = 0.6 and
// ||y|| = 1, the setting of anchors §1.1/§1.2), quantize x, and report
//   mse            mean ||x - x_hat||^2
//   ip_bias        mean(est - <y,x>),  ip_bias_se its standard error
//   ip_var_scaled  d * mean((est - <y,x>)^2)
//   shrink         mean(est) / mean(<y,x>)
//   bytes_per_vector, encode_vectors_per_s, score_vectors_per_s (one prepared query scored
//   against all N codes: the attention access pattern).
#include <cstdint>
#include <string>
#include <vector>

#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

struct UnitPairs {
  int dim = 0;
  std::size_t n = 0;
  std::vector<float> x;  // [n, dim], unit rows
  std::vector<float> y;  // [n, dim], unit rows with <y_i, x_i> = 0.6
};

// Deterministic in (dim, n, seed). Throws QuantizerConfigError for n = 0 or dim < 2.
UnitPairs draw_unit_pairs(int dim, std::size_t n, uint64_t seed);

struct QuantEvalResult {
  std::string method;
  int bits = 0, dim = 0;
  std::size_t n = 0;
  double mse = 0, ip_bias = 0, ip_bias_se = 0, ip_var_scaled = 0, shrink = 0;
  std::size_t bytes_per_vector = 0;
  double encode_vectors_per_s = 0, score_vectors_per_s = 0;
};

// Data seed and quantizer seed are both `seed` (through independent derived streams).
QuantEvalResult evaluate_quantizer(const Quantizer& quantizer, std::size_t n, uint64_t seed);
QuantEvalResult evaluate_quantizer(const std::string& method, int bits, int dim, std::size_t n, uint64_t seed);

}  // namespace veloxquant::quant
