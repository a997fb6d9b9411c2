#include "veloxquant/eviction/squeeze_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/pyramid_schedule.h"

namespace veloxquant::eviction {

double concentration_score(const float* keys, int64_t rows, int64_t dim) {
  if (rows < 2) return 0.0;
  // sum_{i != j} <u_i, u_j> = |sum_i u_i|^2 - sum_i |u_i|^2: one pass instead of the Gram matrix.
  std::vector<double> sum(static_cast<std::size_t>(dim), 0.0);
  double self = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* k = keys + r * dim;
    double norm2 = 0.0;
    for (int64_t d = 0; d < dim; ++d) norm2 += double(k[d]) * k[d];
    const double inv = 1.0 / (std::sqrt(norm2) + 1e-8);
    double u2 = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      const double u = k[d] * inv;
      sum[static_cast<std::size_t>(d)] += u;
      u2 += u * u;
    }
    self += u2;
  }
  double total = 0.0;
  for (double s : sum) total += s * s;
  return (total - self) / (double(rows) * double(rows - 1));
}

double layer_concentration(const lm::Tensor& keys) {
  const std::vector<float> k = keys.to_f32();
  const int64_t heads = keys.dim(0) * keys.dim(1), rows = keys.dim(2), dim = keys.dim(3);
  double sum = 0.0;
  for (int64_t bh = 0; bh < heads; ++bh) sum += concentration_score(k.data() + bh * rows * dim, rows, dim);
  return heads > 0 ? sum / double(heads) : 0.0;
}

std::vector<int> squeeze_budgets(const std::vector<double>& concentrations, int average_budget, int n_sink,
                                 double strength) {
  if (!(strength >= 0.0 && strength <= 1.0)) {
    throw QuantizerConfigError("squeeze_strength must lie in [0, 1], got " + std::to_string(strength));
  }
  const std::size_t n = concentrations.size();
  const int floor = n_sink + 1;
  if (n == 0) return {};
  if (n == 1) return {std::max(average_budget, floor)};
  std::vector<double> raw(n);
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += raw[i] = 1.0 - std::clamp(concentrations[i], 0.0, 1.0);
  std::vector<int> budgets(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double weight = total <= 0.0 ? 1.0 : raw[i] * double(n) / total;
    const double blended = (1.0 - strength) + strength * weight;
    budgets[i] = std::max(static_cast<int>(round_half_even(double(average_budget) * blended)), floor);
  }
  return budgets;
}

SqueezeSchedule::SqueezeSchedule(std::size_t n_layers, int average_budget, int n_sink, double strength)
    : average_budget_(average_budget), n_sink_(n_sink), strength_(strength), reports_(n_layers) {}

void SqueezeSchedule::report(std::size_t layer, double concentration) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (layer >= reports_.size() || reports_[layer] || !budgets_.empty()) return;  // the first report wins
  reports_[layer] = concentration;
  if (std::any_of(reports_.begin(), reports_.end(), [](const std::optional<double>& r) { return !r; })) return;
  std::vector<double> c;
  for (const std::optional<double>& r : reports_) c.push_back(*r);
  budgets_ = squeeze_budgets(c, average_budget_, n_sink_, strength_);
}

std::optional<int> SqueezeSchedule::budget(std::size_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (budgets_.empty() || layer >= budgets_.size()) return std::nullopt;
  return budgets_[layer];
}

}  // namespace veloxquant::eviction
