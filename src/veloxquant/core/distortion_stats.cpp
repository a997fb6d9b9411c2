#include "veloxquant/core/distortion_stats.h"

#include <cmath>
#include <limits>

namespace veloxquant::core {

void DistortionStats::add_reconstruction(const float* x, const float* x_hat, std::size_t dim) {
  double err = 0.0, sig = 0.0;
  for (std::size_t j = 0; j < dim; ++j) {
    const double e = static_cast<double>(x[j]) - x_hat[j];
    err += e * e;
    sig += static_cast<double>(x[j]) * x[j];
    if (std::abs(e) > max_abs_) max_abs_ = std::abs(e);
  }
  sq_error_ += err;
  sq_signal_ += sig;
  ++vectors_;
}

void DistortionStats::add_inner_product(double estimate, double truth) {
  const double err = estimate - truth;
  ++ips_;
  const double delta = err - mean_err_;
  mean_err_ += delta / static_cast<double>(ips_);
  m2_err_ += delta * (err - mean_err_);
  sum_sq_err_ += err * err;
  sum_est_ += estimate;
  sum_truth_ += truth;
}

double DistortionStats::mse() const {
  return vectors_ ? sq_error_ / static_cast<double>(vectors_) : std::numeric_limits<double>::quiet_NaN();
}
double DistortionStats::snr_db() const {
  if (!vectors_) return std::numeric_limits<double>::quiet_NaN();
  if (sq_error_ == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sq_signal_ / sq_error_);
}
double DistortionStats::ip_bias() const { return ips_ ? mean_err_ : std::numeric_limits<double>::quiet_NaN(); }
double DistortionStats::ip_var() const {
  return ips_ > 1 ? m2_err_ / static_cast<double>(ips_ - 1) : std::numeric_limits<double>::quiet_NaN();
}
double DistortionStats::ip_bias_se() const {
  return ips_ > 1 ? std::sqrt(ip_var() / static_cast<double>(ips_)) : std::numeric_limits<double>::quiet_NaN();
}
double DistortionStats::ip_mse() const {
  return ips_ ? sum_sq_err_ / static_cast<double>(ips_) : std::numeric_limits<double>::quiet_NaN();
}
double DistortionStats::shrink() const {
  return ips_ ? sum_est_ / sum_truth_ : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace veloxquant::core
