#pragma once
// One place that turns (x, x_hat) pairs and (estimate, truth) inner-product pairs into the
// numbers tests, benchmarks and `veloxquant quant-eval` report, so they all mean the same:
//   mse           mean ||x - x_hat||^2
//   snr_db        10 log10(sum ||x||^2 / sum ||x - x_hat||^2)
//   max_abs_error largest |x_j - x_hat_j|
//   ip_bias       mean(est - truth), ip_bias_se its standard error (sample sd / sqrt n)
//   ip_mse        mean((est - truth)^2);  ip_var the sample variance of (est - truth)
//   shrink        mean(est) / mean(truth)
// Sums are in double (Welford for the error variance) so a million samples stay exact enough.
#include <cstddef>
#include <cstdint>

namespace veloxquant::core {

class DistortionStats {
 public:
  void add_reconstruction(const float* x, const float* x_hat, std::size_t dim);
  void add_inner_product(double estimate, double truth);

  std::size_t vectors() const { return vectors_; }
  std::size_t inner_products() const { return ips_; }
  double mse() const;
  double snr_db() const;
  double max_abs_error() const { return max_abs_; }
  double ip_bias() const;
  double ip_bias_se() const;
  double ip_var() const;
  double ip_mse() const;
  double shrink() const;

 private:
  std::size_t vectors_ = 0;
  double sq_error_ = 0.0, sq_signal_ = 0.0, max_abs_ = 0.0;
  std::size_t ips_ = 0;
  double mean_err_ = 0.0, m2_err_ = 0.0;  // Welford
  double sum_sq_err_ = 0.0, sum_est_ = 0.0, sum_truth_ = 0.0;
};

}  // namespace veloxquant::core
