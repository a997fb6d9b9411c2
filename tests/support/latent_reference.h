#pragma once
// Shared by the palu and kvtc tests (caches/latent_cache.h): rows with a known low-rank structure,
// and the rows a latent cache must return, rebuilt in the test from the basis it saved
// (state(): codes, basis, mean, ranks per side) and a quantizer written in the test.
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "lm/tensor.h"
#include "support/kv_test_data.h"

namespace test_support {

// [1, heads, t, d] rows of rank `rank` plus a little noise and an offset (the mean PCA removes).
inline lm::Tensor low_rank_rows(int64_t heads, int64_t t, int64_t d, int64_t rank, uint64_t seed) {
  const std::vector<float> dirs = random_kv(1, heads, rank, d, seed, lm::DType::F32).to_f32();
  const std::vector<float> coef = random_kv(1, heads, t, rank, seed + 1, lm::DType::F32).to_f32();
  const std::vector<float> noise = random_kv(1, heads, t, d, seed + 2, lm::DType::F32).to_f32();
  std::vector<float> x(static_cast<std::size_t>(heads * t * d));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        double v = 0.3 + 0.01 * noise[static_cast<std::size_t>((h * t + r) * d + c)];
        for (int64_t k = 0; k < rank; ++k) {
          v += coef[static_cast<std::size_t>((h * t + r) * rank + k)] / double(1 + k) *
               dirs[static_cast<std::size_t>((h * rank + k) * d + c)] / 4.0;
        }
        x[static_cast<std::size_t>((h * t + r) * d + c)] = static_cast<float>(v);
      }
    }
  }
  return lm::Tensor::from_f32(x, {1, heads, t, d}, lm::DType::F32);
}

// The rows [1, heads, t, d] a latent cache with `groups` head groups must return for `rows`
// (batch 1): per group, z = U (x - mu) in double over the group's concatenated row, then
// quantize(g, z) (the method's rule, written in the test), then mu + sum_i z'_i U_i.
// basis [1, G, r_max, w], mean [1, G, 1, w], ranks [1, G, 1, 1] as the cache saved them.
using LatentQuantizer = std::function<std::vector<double>(int64_t g, const std::vector<double>& z)>;
inline std::vector<float> latent_reference(const lm::Tensor& rows, const lm::Tensor& basis, const lm::Tensor& mean,
                                           const lm::Tensor& ranks, const LatentQuantizer& quantize) {
  const int64_t heads = rows.dim(1), t = rows.dim(2), d = rows.dim(3);
  const int64_t groups = basis.dim(1), r_max = basis.dim(2), w = basis.dim(3), hpg = heads / groups;
  const std::vector<float> x = rows.to_f32(), u = basis.to_f32(), mu = mean.to_f32();
  const std::vector<float> rk = ranks.astype(lm::DType::F32).to_f32();
  std::vector<float> out(x.size());
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r = static_cast<int64_t>(rk[static_cast<std::size_t>(g)]);
    for (int64_t j = 0; j < t; ++j) {
      std::vector<float> row(static_cast<std::size_t>(w));
      for (int64_t l = 0; l < hpg; ++l) {
        for (int64_t c = 0; c < d; ++c) {
          row[static_cast<std::size_t>(l * d + c)] = x[static_cast<std::size_t>(((g * hpg + l) * t + j) * d + c)];
        }
      }
      std::vector<double> z(static_cast<std::size_t>(r));
      for (int64_t i = 0; i < r; ++i) {
        double dot = 0;
        for (int64_t c = 0; c < w; ++c) {
          dot += double(u[static_cast<std::size_t>((g * r_max + i) * w + c)]) *
                 static_cast<double>(row[static_cast<std::size_t>(c)] - mu[static_cast<std::size_t>(g * w + c)]);
        }
        z[static_cast<std::size_t>(i)] = static_cast<float>(dot);
      }
      const std::vector<double> zq = quantize(g, z);
      for (int64_t c = 0; c < w; ++c) {
        double v = mu[static_cast<std::size_t>(g * w + c)];
        for (int64_t i = 0; i < r; ++i)
          v += zq[static_cast<std::size_t>(i)] * u[static_cast<std::size_t>((g * r_max + i) * w + c)];
        const int64_t l = c / d, cc = c % d;
        out[static_cast<std::size_t>(((g * hpg + l) * t + j) * d + cc)] = static_cast<float>(v);
      }
    }
  }
  return out;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float w = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]));
  return a.size() == b.size() ? w : 1e30f;
}

}  // namespace test_support
