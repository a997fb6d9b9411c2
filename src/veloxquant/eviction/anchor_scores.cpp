#include "veloxquant/eviction/anchor_scores.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "veloxquant/eviction/ordered_sums.h"
#include "veloxquant/eviction/pyramid_schedule.h"

namespace veloxquant::eviction {

namespace {

// v.resize(n) for this thread's buffers, with half as much again reserved whenever it grows: a
// store that grows by a row a step reallocates once per half again, not each time a size rounded
// up to a SIMD block steps past the last exact fit.
template <class T>
void grow_to(std::vector<T>& v, std::size_t n) {
  if (n > v.capacity()) v.reserve(n + n / 2);
  v.resize(n);
}

// Min-max normalisation to [0, 1]; a (nearly) constant vector becomes all zeros.
void min_max_normalise(std::vector<double>& x) {
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  const double low = *lo, span = *hi - *lo;
  for (double& v : x) v = span <= 1e-12 ? 0.0 : (v - low) / span;
}

// Mean of the top fraction minus the mean of the bottom fraction (how well a scale separates
// this head's keys). Only the k smallest and the k largest values are ordered (sorting every
// key's anomaly, three times a step, was a fifth of nestedkv's decode work; a heap of k per side
// measured slower still); each sum still runs over its k values in ascending order, as over a
// sorted copy.
double top_bottom_gap(const std::vector<double>& values) {
  thread_local std::vector<double> x;  // a partially ordered copy, reused
  x.resize(values.size());             // resize, not assign(first, last): that reallocates to exactly n as n grows
  std::copy(values.begin(), values.end(), x.begin());
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t k = std::max<int64_t>(1, round_half_even(double(n) * 0.10));  // k <= n / 2 for n >= 2
  const auto low_end = x.begin() + k, high_begin = x.end() - k;
  std::nth_element(x.begin(), low_end, x.end());
  std::sort(x.begin(), low_end);
  std::nth_element(low_end, high_begin, x.end());
  std::sort(high_begin, x.end());
  double top = 0.0, bottom = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    bottom += x[static_cast<std::size_t>(i)];
    top += x[static_cast<std::size_t>(n - k + i)];
  }
  return (top - bottom) / double(k);
}

// Everything after the three anomalies (negated dot products): the normalisation, the head
// blend and the surprise gate.
void finish_anchor_scores(std::vector<double>& a_s, std::vector<double>& a_e, std::vector<double>& a_c,
                          std::vector<double>& surprise, const AnchorParams& params, float* out) {
  const std::size_t un = a_s.size();
  min_max_normalise(a_s);
  min_max_normalise(a_e);
  min_max_normalise(a_c);
  // Head-adaptive blend.
  double w[3] = {0.4, 0.4, 0.2};
  if (un > 1) {
    const double gaps[3] = {top_bottom_gap(a_s), top_bottom_gap(a_e), top_bottom_gap(a_c)};
    double logits[3], top = -INFINITY, total = 0.0;
    for (int s = 0; s < 3; ++s) top = std::max(top, logits[s] = std::log(w[s]) + params.beta * gaps[s]);
    for (int s = 0; s < 3; ++s) total += (logits[s] = std::exp(logits[s] - top));
    for (int s = 0; s < 3; ++s) w[s] = logits[s] / total;
  }
  // Surprise gate.
  surprise.resize(un);
  for (std::size_t i = 0; i < un; ++i) {
    const double m = (a_s[i] + a_e[i] + a_c[i]) / 3.0;
    const double var = ((a_s[i] - m) * (a_s[i] - m) + (a_e[i] - m) * (a_e[i] - m) + (a_c[i] - m) * (a_c[i] - m)) / 3.0;
    surprise[i] = std::sqrt(var);
  }
  min_max_normalise(surprise);
  double centre = 0.0;
  for (double s : surprise) centre += s;
  centre /= double(un);
  for (std::size_t i = 0; i < un; ++i) {
    const double blend = w[0] * a_s[i] + w[1] * a_e[i] + w[2] * a_c[i];
    const double strongest = std::max({a_s[i], a_e[i], a_c[i]});
    const double alpha = 1.0 / (1.0 + std::exp(-params.kappa * (surprise[i] - centre - params.tau)));
    out[i] = static_cast<float>((1.0 - alpha) * blend + alpha * strongest);
  }
}

}  // namespace

int64_t anchor_block_size(int64_t n) { return std::min<int64_t>(256, std::max<int64_t>(128, n / 32)); }

void nested_anchor_scores(const float* keys, const int32_t* rows, int64_t n, int64_t dim, const AnchorParams& params,
                          float* out) {
  if (n <= 0) return;
  const std::size_t un = static_cast<std::size_t>(n), ud = static_cast<std::size_t>(dim);
  // This thread's buffers, reused (nestedkv scores every decode step): resized, never rebuilt.
  // Every sum runs in the order of scalar::nested_anchor_scores (ordered_sums.h: one key per
  // SIMD lane for a sum along a key, one element per lane for a sum over keys), so the scores
  // equal it bit for bit; the unit keys are recomputed from the keys where needed (the same
  // product) rather than stored, which kept the step's data in cache.
  thread_local std::vector<double> column_store, inv, a_s, a_e, a_c, total, block_sums, running, products, surprise;
  // Columns stride apart, stride a whole number of 64-byte lines from a line boundary: the
  // transposed blocks are stored as whole lines.
  constexpr int64_t kLine = 8;  // doubles
  const int64_t stride = (n + kLine - 1) / kLine * kLine;
  grow_to(column_store, static_cast<std::size_t>(stride * dim + kLine));
  const auto misalign = reinterpret_cast<std::uintptr_t>(column_store.data()) % 64;
  double* columns = column_store.data() + (misalign ? (64 - misalign) / sizeof(double) : 0);
  inv.resize(un);
  key_columns_and_norms(keys, rows, n, dim, columns, stride, inv.data());  // inv holds the squared norms
  for (double& v : inv) v = 1.0 / std::max(std::sqrt(v), 1e-12);
  for (std::vector<double>* v : {&a_s, &a_e, &a_c}) v->resize(un);
  // Stable memory (the mean of every key) and episodic memory (the mean of the key's block).
  const int64_t block = std::max<int64_t>(1, std::min(anchor_block_size(n), n));
  const int64_t blocks = (n + block - 1) / block;
  total.resize(ud);
  block_sums.resize(static_cast<std::size_t>(blocks * dim));
  unit_sums(keys, rows, n, dim, inv.data(), block, total.data(), block_sums.data());
  for (double& m : total) m /= double(n);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * block, end = std::min(start + block, n);
    double* mean = block_sums.data() + b * dim;
    for (int64_t d = 0; d < dim; ++d) mean[d] /= double(end - start);
    unit_column_dots(columns, stride, inv.data(), start, end, dim, total.data(), mean, a_s.data(), a_e.data());
  }
  // Current memory: the mean of the window ending at the key (a running sum).
  running.resize(ud);
  products.resize(16 * ud);
  recent_anomalies(keys, rows, n, dim, inv.data(), std::max<int64_t>(1, params.window), running.data(), products.data(),
                   a_c.data());
  for (std::size_t i = 0; i < un; ++i) {
    a_s[i] = -a_s[i];
    a_e[i] = -a_e[i];
    a_c[i] = -a_c[i];
  }
  finish_anchor_scores(a_s, a_e, a_c, surprise, params, out);
}

namespace scalar {

void nested_anchor_scores(const float* keys, const int32_t* rows, int64_t n, int64_t dim, const AnchorParams& params,
                          float* out) {
  if (n <= 0) return;
  const std::size_t un = static_cast<std::size_t>(n), ud = static_cast<std::size_t>(dim);
  std::vector<double> unit(un * ud), a_s(un), a_e(un), a_c(un), mean(ud), running(ud, 0.0), surprise(un);
  for (int64_t i = 0; i < n; ++i) {
    const float* k = keys + (rows ? rows[i] : i) * dim;
    double norm = 0.0;
    for (int64_t d = 0; d < dim; ++d) norm += double(k[d]) * k[d];
    const double inv = 1.0 / std::max(std::sqrt(norm), 1e-12);
    for (int64_t d = 0; d < dim; ++d) unit[static_cast<std::size_t>(i) * ud + static_cast<std::size_t>(d)] = k[d] * inv;
  }
  const auto dot = [&](int64_t i, const double* m) {
    double s = 0.0;
    for (int64_t d = 0; d < dim; ++d) s += unit[static_cast<std::size_t>(i) * ud + static_cast<std::size_t>(d)] * m[d];
    return s;
  };
  std::fill(mean.begin(), mean.end(), 0.0);
  for (std::size_t i = 0; i < un; ++i)
    for (std::size_t d = 0; d < ud; ++d) mean[d] += unit[i * ud + d];
  for (double& m : mean) m /= double(n);
  for (int64_t i = 0; i < n; ++i) a_s[static_cast<std::size_t>(i)] = -dot(i, mean.data());
  const int64_t block = std::max<int64_t>(1, std::min(anchor_block_size(n), n));
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(start + block, n);
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t i = start; i < end; ++i)
      for (std::size_t d = 0; d < ud; ++d) mean[d] += unit[static_cast<std::size_t>(i) * ud + d];
    for (double& m : mean) m /= double(end - start);
    for (int64_t i = start; i < end; ++i) a_e[static_cast<std::size_t>(i)] = -dot(i, mean.data());
  }
  const int64_t window = std::max<int64_t>(1, params.window);
  for (int64_t i = 0; i < n; ++i) {
    for (std::size_t d = 0; d < ud; ++d) running[d] += unit[static_cast<std::size_t>(i) * ud + d];
    if (i >= window) {
      for (std::size_t d = 0; d < ud; ++d) running[d] -= unit[static_cast<std::size_t>(i - window) * ud + d];
    }
    const double count = double(std::min(i + 1, window));
    for (std::size_t d = 0; d < ud; ++d) mean[d] = running[d] / count;
    a_c[static_cast<std::size_t>(i)] = -dot(i, mean.data());
  }
  finish_anchor_scores(a_s, a_e, a_c, surprise, params, out);
}

}  // namespace scalar

}  // namespace veloxquant::eviction
