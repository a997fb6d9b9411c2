#include "lm/kernels/rope.h"

#include <cmath>
#include <vector>

namespace lm::kernels {

void rope(float* x, int64_t n_tokens, int n_heads, int head_dim, int64_t pos0, float theta, RopeStyle style,
          int rope_dim) {
  if (rope_dim <= 0 || rope_dim > head_dim) rope_dim = head_dim;
  const int half = rope_dim / 2;
  // Inverse frequencies as llama2.c computes them: 1 / theta^(2i / rope_dim) in f32.
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
  }
  std::vector<float> cos_t(static_cast<std::size_t>(half)), sin_t(static_cast<std::size_t>(half));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float pos = static_cast<float>(pos0 + t);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const int a = style == RopeStyle::kNormal ? 2 * i : i;
        const int b = style == RopeStyle::kNormal ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cos_t[i] - x1 * sin_t[i];
        v[b] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

}  // namespace lm::kernels
