#pragma once
// Test data for KV caches: deterministic [B, H, S, D] tensors and a brute-force reference of
// what a cache fed a sequence of token rows must hold. Header-only (tests/support/*.cpp are
// linked into every test executable, including the ones that do not link lm).
#include <cstdint>
#include <random>
#include <vector>

#include "lm/tensor.h"

namespace test_support {

// Values in [-4, 4) rounded through `dtype`, so a cache storing `dtype` must return them
// bit-exactly.
inline lm::Tensor random_kv(int64_t batch, int64_t heads, int64_t tokens, int64_t dim, uint64_t seed,
                            lm::DType dtype = lm::DType::F16) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> values(static_cast<std::size_t>(batch * heads * tokens * dim));
  for (float& v : values) v = dist(rng);
  return lm::Tensor::from_f32(values, {batch, heads, tokens, dim}, dtype);
}

// Concatenates [B, H, S_i, D] tensors along axis 2 (f32), the reference for what a full cache
// returns after being fed them in order.
inline std::vector<float> concat_tokens_f32(const std::vector<lm::Tensor>& parts) {
  const int64_t batch = parts.at(0).dim(0), heads = parts.at(0).dim(1), dim = parts.at(0).dim(3);
  int64_t total = 0;
  for (const auto& p : parts) total += p.dim(2);
  std::vector<float> out(static_cast<std::size_t>(batch * heads * total * dim));
  int64_t row = 0;
  for (const auto& p : parts) {
    const std::vector<float> v = p.to_f32();
    const int64_t s = p.dim(2);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < s; ++t)
          for (int64_t d = 0; d < dim; ++d)
            out[static_cast<std::size_t>(((b * heads + h) * total + row + t) * dim + d)] =
                v[static_cast<std::size_t>(((b * heads + h) * s + t) * dim + d)];
    row += s;
  }
  return out;
}

// Rows [begin, end) along axis 2 of a [B, H, S, D] tensor, as a new tensor.
inline lm::Tensor token_rows(const lm::Tensor& t, int64_t begin, int64_t end) { return t.slice(2, begin, end).clone(); }

}  // namespace test_support
