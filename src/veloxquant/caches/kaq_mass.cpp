#include "veloxquant/caches/kaq_mass.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace veloxquant {

void kaq_mass(const float* rows, int64_t n, const float* proxies, int64_t n_proxies, int64_t d, float* mass) {
  std::fill(mass, mass + n, 0.0f);
  if (n <= 0) return;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  thread_local std::vector<double> logits, total;  // reused: anchorkv calls this every decode step
  logits.resize(static_cast<std::size_t>(n));
  total.assign(static_cast<std::size_t>(n), 0.0);
  for (int64_t p = 0; p < n_proxies; ++p) {
    const float* q = proxies + p * d;
    double top = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      const float* k = rows + i * d;
      double dot = 0.0;
      for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * static_cast<double>(k[e]);
      logits[static_cast<std::size_t>(i)] = dot * scale;
      top = std::max(top, dot * scale);
    }
    double sum = 0.0;
    for (double& l : logits) {
      l = std::exp(l - top);
      sum += l;
    }
    for (int64_t i = 0; i < n; ++i) total[static_cast<std::size_t>(i)] += logits[static_cast<std::size_t>(i)] / sum;
  }
  for (int64_t i = 0; i < n; ++i) mass[i] = static_cast<float>(total[static_cast<std::size_t>(i)]);
}

}  // namespace veloxquant
