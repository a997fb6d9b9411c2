#pragma once
// Attention in double over rows a cache returned (update_and_fetch), the reference every fused
// path is held to: softmax(q k^T * scale) v, GQA (query head h reads kv head h / (hq / hkv)),
// causal from `first` (query i sees rows up to first + i), optionally within a sliding window.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "lm/cache/cache.h"

namespace test_support {

// Reference attention over what update_and_fetch returns, in double.
inline std::vector<float> reference_attention(const lm::KeysValues& kv, const std::vector<float>& q, int64_t hq,
                                              int64_t n, int64_t first, float scale,
                                              std::optional<int64_t> window = std::nullopt) {
  const int64_t hkv = kv.keys.dim(1), t_total = kv.keys.dim(2), d = kv.keys.dim(3);
  const std::vector<float> k = kv.keys.to_f32(), v = kv.values.to_f32();
  std::vector<float> out(static_cast<std::size_t>(hq * n * d));
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t g = h / (hq / hkv);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = first + i;
      const int64_t begin = window ? std::max<int64_t>(0, pos - *window + 1) : 0;
      std::vector<double> w;
      double mx = -1e300;
      for (int64_t r = begin; r <= pos && r < t_total; ++r) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += double(q[((h * n) + i) * d + c]) * k[(g * t_total + r) * d + c];
        w.push_back(s * scale);
        mx = std::max(mx, w.back());
      }
      double total = 0;
      for (double& x : w) total += (x = std::exp(x - mx));
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (std::size_t j = 0; j < w.size(); ++j)
          acc += w[j] * v[(g * t_total + begin + static_cast<int64_t>(j)) * d + c];
        out[static_cast<std::size_t>((h * n + i) * d + c)] = static_cast<float>(acc / total);
      }
    }
  }
  return out;
}

}  // namespace test_support
