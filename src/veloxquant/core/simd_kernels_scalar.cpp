// Scalar references for simd_kernels.h. Deliberately simple: these define the results.
#include <algorithm>

#include "veloxquant/core/simd_kernels.h"

namespace veloxquant::core::scalar {

float dot(const float* a, const float* b, std::size_t n) {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void butterfly(float* a, float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = a[i], y = b[i];
    a[i] = x + y;
    b[i] = x - y;
  }
}

void fwht_short_strides(float* x, std::size_t n) {
  for (std::size_t h = 1; h < 8; h *= 2) {
    for (std::size_t i = 0; i < n; i += 2 * h) {
      for (std::size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

void scale(float* x, float s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= s;
}

void multiply(const float* a, const float* b, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

float lut_sum(const float* lut, const uint8_t* bytes, std::size_t n) {
  float sum = 0.0f;
  for (std::size_t p = 0; p < n; ++p) sum += lut[p * 256 + bytes[p]];
  return sum;
}

void count_below(const float* x, std::size_t n, const float* boundaries, std::size_t nb, uint8_t* idx) {
  for (std::size_t i = 0; i < n; ++i) {
    // lower_bound finds the first boundary >= x, i.e. the count of boundaries < x.
    idx[i] = static_cast<uint8_t>(std::lower_bound(boundaries, boundaries + nb, x[i]) - boundaries);
  }
}

}  // namespace veloxquant::core::scalar
