#include "veloxquant/eviction/pyramid_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "veloxquant/errors.h"

namespace veloxquant::eviction {

int64_t round_half_even(double value) {
  const double lower = std::floor(value);
  const double diff = value - lower;
  if (diff < 0.5) return static_cast<int64_t>(lower);
  if (diff > 0.5) return static_cast<int64_t>(lower) + 1;
  return std::fmod(lower, 2.0) == 0.0 ? static_cast<int64_t>(lower) : static_cast<int64_t>(lower) + 1;
}

std::vector<int> pyramid_budgets(int average_budget, int n_sink, double beta, std::size_t n_layers) {
  if (!(beta >= 1.0)) {
    throw QuantizerConfigError("pyramid_beta must be >= 1.0, got " + std::to_string(beta));
  }
  if (n_layers < 1) throw QuantizerConfigError("pyramidkv needs at least one attention layer, got 0");
  const double floor_budget = n_sink + 1;
  if (n_layers == 1) return {std::max(average_budget, n_sink + 1)};
  const double avg = average_budget;
  const double span = (avg - floor_budget) * (beta - 1.0);
  const double hi = avg + span, lo = avg - span;
  const std::size_t n = n_layers;
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = hi + (lo - hi) * double(i) / double(n - 1);
  const double target = avg * double(n);
  for (std::size_t round = 0; round < n; ++round) {
    std::vector<bool> clamped(n, false);
    for (std::size_t i = 0; i < n; ++i) {
      if (v[i] <= floor_budget) {  // at the floor: no slack to give either
        v[i] = floor_budget;
        clamped[i] = true;
      }
    }
    double total = 0.0;
    for (double x : v) total += x;
    const double excess = total - target;
    if (excess <= 1e-9) break;
    double slack = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!clamped[i]) slack += v[i] - floor_budget;
    }
    if (slack <= 0.0) break;
    for (std::size_t i = 0; i < n; ++i) {
      if (!clamped[i]) v[i] -= excess * (v[i] - floor_budget) / slack;
    }
  }
  std::vector<int> budgets(n);
  for (std::size_t i = 0; i < n; ++i) {
    budgets[i] = std::max(static_cast<int>(round_half_even(v[i])), n_sink + 1);
  }
  return budgets;
}

}  // namespace veloxquant::eviction
