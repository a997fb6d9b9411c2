#include "veloxquant/eviction/anchor_scores.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "veloxquant/eviction/pyramid_schedule.h"

namespace veloxquant::eviction {

namespace {

// Min-max normalisation to [0, 1]; a (nearly) constant vector becomes all zeros.
void min_max_normalise(std::vector<double>& x) {
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  const double low = *lo, span = *hi - *lo;
  for (double& v : x) v = span <= 1e-12 ? 0.0 : (v - low) / span;
}

// Mean of the top fraction minus the mean of the bottom fraction (how well a scale separates
// this head's keys).
double top_bottom_gap(const std::vector<double>& values) {
  thread_local std::vector<double> x;  // a sorted copy, reused
  x.resize(values.size());             // resize, not assign(first, last): that reallocates to exactly n as n grows
  std::copy(values.begin(), values.end(), x.begin());
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t k = std::max<int64_t>(1, round_half_even(double(n) * 0.10));
  std::sort(x.begin(), x.end());
  double top = 0.0, bottom = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    bottom += x[static_cast<std::size_t>(i)];
    top += x[static_cast<std::size_t>(n - k + i)];
  }
  return (top - bottom) / double(k);
}

}  // namespace

int64_t anchor_block_size(int64_t n) { return std::min<int64_t>(256, std::max<int64_t>(128, n / 32)); }

void nested_anchor_scores(const float* keys, const int32_t* rows, int64_t n, int64_t dim, const AnchorParams& params,
                          float* out) {
  if (n <= 0) return;
  const std::size_t un = static_cast<std::size_t>(n), ud = static_cast<std::size_t>(dim);
  // This thread's buffers, reused (nestedkv scores every decode step): resized, never rebuilt.
  thread_local std::vector<double> unit, a_s, a_e, a_c, mean, running, surprise;
  unit.resize(un * ud);
  for (int64_t i = 0; i < n; ++i) {
    const float* k = keys + (rows ? rows[i] : i) * dim;
    double norm = 0.0;
    for (int64_t d = 0; d < dim; ++d) norm += double(k[d]) * k[d];
    const double inv = 1.0 / std::max(std::sqrt(norm), 1e-12);
    for (int64_t d = 0; d < dim; ++d) unit[static_cast<std::size_t>(i) * ud + static_cast<std::size_t>(d)] = k[d] * inv;
  }
  const auto dot = [&](int64_t i, const double* mean) {
    double s = 0.0;
    for (int64_t d = 0; d < dim; ++d)
      s += unit[static_cast<std::size_t>(i) * ud + static_cast<std::size_t>(d)] * mean[d];
    return s;
  };
  for (std::vector<double>* v : {&a_s, &a_e, &a_c, &surprise}) v->resize(un);
  mean.resize(ud);
  // Stable memory: the mean of every key.
  std::fill(mean.begin(), mean.end(), 0.0);
  for (std::size_t i = 0; i < un; ++i)
    for (std::size_t d = 0; d < ud; ++d) mean[d] += unit[i * ud + d];
  for (double& m : mean) m /= double(n);
  for (int64_t i = 0; i < n; ++i) a_s[static_cast<std::size_t>(i)] = -dot(i, mean.data());
  // Episodic memory: the mean of the key's block.
  const int64_t block = std::max<int64_t>(1, std::min(anchor_block_size(n), n));
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(start + block, n);
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t i = start; i < end; ++i)
      for (std::size_t d = 0; d < ud; ++d) mean[d] += unit[static_cast<std::size_t>(i) * ud + d];
    for (double& m : mean) m /= double(end - start);
    for (int64_t i = start; i < end; ++i) a_e[static_cast<std::size_t>(i)] = -dot(i, mean.data());
  }
  // Current memory: the mean of the window ending at the key (a running sum).
  const int64_t window = std::max<int64_t>(1, params.window);
  running.assign(ud, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (std::size_t d = 0; d < ud; ++d) running[d] += unit[static_cast<std::size_t>(i) * ud + d];
    if (i >= window) {
      for (std::size_t d = 0; d < ud; ++d) running[d] -= unit[static_cast<std::size_t>(i - window) * ud + d];
    }
    const double count = double(std::min(i + 1, window));
    for (std::size_t d = 0; d < ud; ++d) mean[d] = running[d] / count;
    a_c[static_cast<std::size_t>(i)] = -dot(i, mean.data());
  }
  min_max_normalise(a_s);
  min_max_normalise(a_e);
  min_max_normalise(a_c);
  // Head-adaptive blend.
  double w[3] = {0.4, 0.4, 0.2};
  if (n > 1) {
    const double gaps[3] = {top_bottom_gap(a_s), top_bottom_gap(a_e), top_bottom_gap(a_c)};
    double logits[3], top = -INFINITY, total = 0.0;
    for (int s = 0; s < 3; ++s) top = std::max(top, logits[s] = std::log(w[s]) + params.beta * gaps[s]);
    for (int s = 0; s < 3; ++s) total += (logits[s] = std::exp(logits[s] - top));
    for (int s = 0; s < 3; ++s) w[s] = logits[s] / total;
  }
  // Surprise gate.

  for (std::size_t i = 0; i < un; ++i) {
    const double m = (a_s[i] + a_e[i] + a_c[i]) / 3.0;
    const double var = ((a_s[i] - m) * (a_s[i] - m) + (a_e[i] - m) * (a_e[i] - m) + (a_c[i] - m) * (a_c[i] - m)) / 3.0;
    surprise[i] = std::sqrt(var);
  }
  min_max_normalise(surprise);
  double centre = 0.0;
  for (double s : surprise) centre += s;
  centre /= double(n);
  for (std::size_t i = 0; i < un; ++i) {
    const double blend = w[0] * a_s[i] + w[1] * a_e[i] + w[2] * a_c[i];
    const double strongest = std::max({a_s[i], a_e[i], a_c[i]});
    const double alpha = 1.0 / (1.0 + std::exp(-params.kappa * (surprise[i] - centre - params.tau)));
    out[i] = static_cast<float>((1.0 - alpha) * blend + alpha * strongest);
  }
}

}  // namespace veloxquant::eviction
