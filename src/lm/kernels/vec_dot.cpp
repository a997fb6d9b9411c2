#include "lm/kernels/vec_dot.h"

#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "lm/weights/block_formats.h"
#include "lm/weights/dequantize.h"

namespace lm::kernels {

float dot_f32(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums: lets the compiler keep a vector accumulator (and breaks
  // the serial dependency chain) without -ffast-math.
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float vec_dot_reference(GgmlType type, const void* row, const float* x, int64_t n) {
  std::vector<float> w(static_cast<std::size_t>(n));
  dequantize_row(type, row, w.data(), n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * x[i];
  return static_cast<float>(sum);
}

namespace {

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += base::f16_to_f32(w[i + k]) * x[i + k];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += base::f16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += base::bf16_to_f32(w[i + k]) * x[i + k];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += base::bf16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_q4_0(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(row);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK4_0; ++b, x += kQK4_0) {
    // d * sum((q - 8) * x) = d * (sum(q*x) - 8*sum(x)); accumulated per block as q*x - 8x.
    float s = 0.0f;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      s += static_cast<float>((blocks[b].qs[j] & 0x0f) - 8) * x[j];
      s += static_cast<float>((blocks[b].qs[j] >> 4) - 8) * x[j + kQK4_0 / 2];
    }
    sum += base::f16_to_f32(blocks[b].d) * s;
  }
  return sum;
}

float dot_q4_1(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(row);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK4_1; ++b, x += kQK4_1) {
    float sq = 0.0f, sx = 0.0f;
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      sq += static_cast<float>(blocks[b].qs[j] & 0x0f) * x[j] + static_cast<float>(blocks[b].qs[j] >> 4) * x[j + 16];
      sx += x[j] + x[j + 16];
    }
    sum += base::f16_to_f32(blocks[b].d) * sq + base::f16_to_f32(blocks[b].m) * sx;
  }
  return sum;
}

float dot_q8_0(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(row);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float s = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) s += static_cast<float>(blocks[b].qs[j]) * x[j];
    sum += base::f16_to_f32(blocks[b].d) * s;
  }
  return sum;
}

float dot_q4_k(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(row);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockQ4_K& block = blocks[b];
    float scaled = 0.0f, mins = 0.0f;
    for (int g = 0; g < 4; ++g) {
      const uint8_t* q = block.qs + 32 * g;
      const float* xg = x + 64 * g;
      uint8_t sc_lo, mn_lo, sc_hi, mn_hi;
      unpack_q4_k_scale(block.scales, 2 * g, sc_lo, mn_lo);
      unpack_q4_k_scale(block.scales, 2 * g + 1, sc_hi, mn_hi);
      float q_lo = 0.0f, q_hi = 0.0f, x_lo = 0.0f, x_hi = 0.0f;
      for (int l = 0; l < 32; ++l) {
        q_lo += static_cast<float>(q[l] & 0x0f) * xg[l];
        q_hi += static_cast<float>(q[l] >> 4) * xg[32 + l];
        x_lo += xg[l];
        x_hi += xg[32 + l];
      }
      scaled += sc_lo * q_lo + sc_hi * q_hi;
      mins += mn_lo * x_lo + mn_hi * x_hi;
    }
    sum += base::f16_to_f32(block.d) * scaled - base::f16_to_f32(block.dmin) * mins;
  }
  return sum;
}

float dot_q6_k(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(row);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockQ6_K& block = blocks[b];
    float scaled = 0.0f;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      const int8_t* sc = block.scales + 8 * half;
      const float* xh = x + 128 * half;
      // Sixteen-element sub-blocks: k (0..3) picks the 32-element quarter, s (0..1) the
      // sixteen within it; their scale index is s + 2k.
      for (int s = 0; s < 2; ++s) {
        float part[4] = {};
        for (int l = 16 * s; l < 16 * s + 16; ++l) {
          part[0] += static_cast<float>(((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32) * xh[l];
          part[1] += static_cast<float>(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32) * xh[l + 32];
          part[2] += static_cast<float>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * xh[l + 64];
          part[3] += static_cast<float>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * xh[l + 96];
        }
        for (int k = 0; k < 4; ++k) scaled += static_cast<float>(sc[s + 2 * k]) * part[k];
      }
    }
    sum += base::f16_to_f32(block.d) * scaled;
  }
  return sum;
}

}  // namespace

float vec_dot(GgmlType type, const void* row, const float* x, int64_t n) {
  switch (type) {
    case GgmlType::F32: return dot_f32(static_cast<const float*>(row), x, n);
    case GgmlType::F16: return dot_f16(static_cast<const uint16_t*>(row), x, n);
    case GgmlType::BF16: return dot_bf16(static_cast<const uint16_t*>(row), x, n);
    case GgmlType::Q4_0: return dot_q4_0(row, x, n);
    case GgmlType::Q4_1: return dot_q4_1(row, x, n);
    case GgmlType::Q8_0: return dot_q8_0(row, x, n);
    case GgmlType::Q4_K: return dot_q4_k(row, x, n);
    case GgmlType::Q6_K: return dot_q6_k(row, x, n);
    default: break;
  }
  throw base::Unsupported("no dot-product kernel for tensor type " + ggml_type_name(type));
}

}  // namespace lm::kernels
