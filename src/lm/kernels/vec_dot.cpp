#include "lm/kernels/vec_dot.h"

#include <vector>

#include "base/error.h"
#include "lm/kernels/simd_dequantize.h"
#include "lm/kernels/simd_dot.h"
#include "lm/weights/dequantize.h"

namespace lm::kernels {

float dot_f32(const float* a, const float* b, int64_t n) { return simd::dot_f32(a, b, n); }

float vec_dot_reference(GgmlType type, const void* row, const float* x, int64_t n) {
  std::vector<float> w(static_cast<std::size_t>(n));
  dequantize_row(type, row, w.data(), n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * x[i];
  return static_cast<float>(sum);
}

float dot_by_blocks(GgmlType type, const void* row, const float* x, int64_t n) {
  const GgmlTypeInfo info = ggml_type_info(type);
  if (!info.supported) throw base::Unsupported("no dot-product kernel for tensor type " + ggml_type_name(type));
  // Whole blocks of up to kChunk elements (a 256-element super-block, or eight 32-blocks).
  constexpr int64_t kChunk = 256;
  const int64_t chunk = info.block_size >= kChunk ? info.block_size : kChunk / info.block_size * info.block_size;
  const std::size_t chunk_bytes = static_cast<std::size_t>(chunk / info.block_size) * info.type_size;
  const auto* bytes = static_cast<const unsigned char*>(row);
  alignas(64) float w[kChunk];
  float sum = 0.0f;
  int64_t i = 0;
  for (; i + chunk <= n; i += chunk, bytes += chunk_bytes) {
    dequantize_row_fast(type, bytes, w, chunk);
    sum += simd::dot_f32(w, x + i, chunk);
  }
  if (i < n) {
    dequantize_row_fast(type, bytes, w, n - i);
    sum += simd::dot_f32(w, x + i, n - i);
  }
  return sum;
}

float vec_dot(GgmlType type, const void* row, const float* x, int64_t n) {
  switch (type) {
    case GgmlType::F32:
      return simd::dot_f32(static_cast<const float*>(row), x, n);
    case GgmlType::F16:
      return simd::dot_f16(static_cast<const uint16_t*>(row), x, n);
    case GgmlType::BF16:
      return simd::dot_bf16(static_cast<const uint16_t*>(row), x, n);
    case GgmlType::Q4_0:
      return simd::dot_q4_0(row, x, n);
    case GgmlType::Q4_1:
      return simd::dot_q4_1(row, x, n);
    case GgmlType::Q8_0:
      return simd::dot_q8_0(row, x, n);
    case GgmlType::Q4_K:
      return simd::dot_q4_k(row, x, n);
    case GgmlType::Q6_K:
      return simd::dot_q6_k(row, x, n);
    case GgmlType::Q5_0:
      return simd::dot_q5_0(row, x, n);
    case GgmlType::Q5_K:
      return simd::dot_q5_k(row, x, n);
    case GgmlType::Q5_1:
      return simd::dot_q5_1(row, x, n);
    case GgmlType::IQ4_NL:
      return simd::dot_iq4_nl(row, x, n);
    case GgmlType::IQ4_XS:
      return simd::dot_iq4_xs(row, x, n);
    case GgmlType::Q2_K:
      return simd::dot_q2_k(row, x, n);
    case GgmlType::Q3_K:
      return simd::dot_q3_k(row, x, n);
    default:
      break;
  }
  return dot_by_blocks(type, row, x, n);
}

}  // namespace lm::kernels
