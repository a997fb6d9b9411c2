#include "lm/kernels/i16_activations.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "lm/kernels/simd_dot_i16.h"
#include "lm/weights/dequantize.h"

namespace lm::kernels {

bool has_i16_dot(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q5_K:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

void quantize_i16(const float* x, int64_t n, I16Block* out) { simd::quantize_i16(x, n, out); }

void quantize_i16_reference(const float* x, int64_t n, I16Block* out) {
  for (int64_t b = 0; b < n / kI16Block; ++b, x += kI16Block) {
    float amax = 0.0f;
    for (int i = 0; i < kI16Block; ++i) amax = std::max(amax, std::abs(x[i]));
    const float d = amax / 32767.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < kI16Block; ++i) {
      const auto q = static_cast<int32_t>(std::nearbyint(x[i] * inv));
      out[b].q[i] = static_cast<int16_t>(q);
      sum += q;
    }
    out[b].d = d;
    out[b].sum = d * static_cast<float>(sum);
  }
}

float vec_dot_i16(GgmlType type, const void* row, const I16Block* x, int64_t n) {
  switch (type) {
    case GgmlType::Q4_0:
      return simd::dot_i16_q4_0(row, x, n);
    case GgmlType::Q4_1:
      return simd::dot_i16_q4_1(row, x, n);
    case GgmlType::Q8_0:
      return simd::dot_i16_q8_0(row, x, n);
    case GgmlType::Q4_K:
      return simd::dot_i16_q4_k(row, x, n);
    case GgmlType::Q6_K:
      return simd::dot_i16_q6_k(row, x, n);
    case GgmlType::Q5_0:
      return simd::dot_i16_q5_0(row, x, n);
    case GgmlType::Q5_K:
      return simd::dot_i16_q5_k(row, x, n);
    case GgmlType::Q5_1:
      return simd::dot_i16_q5_1(row, x, n);
    case GgmlType::IQ4_NL:
      return simd::dot_i16_iq4_nl(row, x, n);
    case GgmlType::IQ4_XS:
      return simd::dot_i16_iq4_xs(row, x, n);
    case GgmlType::Q2_K:
      return simd::dot_i16_q2_k(row, x, n);
    case GgmlType::Q3_K:
      return simd::dot_i16_q3_k(row, x, n);
    default:
      break;
  }
  throw base::Unsupported("no i16-activation dot product for tensor type " + ggml_type_name(type));
}

void vec_dot_i16_rows(GgmlType type, const void* rows, std::size_t row_bytes, int64_t n_rows, const I16Block* x,
                      int64_t n, float* y) {
  if (!has_i16_dot(type))
    throw base::Unsupported("no i16-activation dot product for tensor type " + ggml_type_name(type));
  simd::dot_i16_rows(type, rows, row_bytes, n_rows, x, n, y);
}

float vec_dot_i16_reference(GgmlType type, const void* row, const I16Block* x, int64_t n) {
  if (!has_i16_dot(type))
    throw base::Unsupported("no i16-activation dot product for tensor type " + ggml_type_name(type));
  std::vector<float> w(static_cast<std::size_t>(n));
  dequantize_row(type, row, w.data(), n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const I16Block& block = x[i / kI16Block];
    sum += static_cast<double>(w[i]) * (static_cast<double>(block.d) * block.q[i % kI16Block]);
  }
  return static_cast<float>(sum);
}

}  // namespace lm::kernels
