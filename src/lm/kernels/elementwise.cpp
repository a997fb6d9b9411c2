#include "lm/kernels/elementwise.h"

#include <cmath>
#include <limits>

namespace lm::kernels {

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  // Sum of squares in double: for wide rows (thousands of elements) the f32 sum would lose
  // bits the reference runtimes keep.
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

void softmax(float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max == -std::numeric_limits<float>::infinity()) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

void swiglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void geglu_reference(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
}

}  // namespace lm::kernels
