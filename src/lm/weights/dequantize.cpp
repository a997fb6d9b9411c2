#include "lm/weights/dequantize.h"

#include <cstring>
#include <string>

#include "base/error.h"
#include "base/half.h"
#include "lm/weights/block_formats.h"

namespace lm {

void dequantize_row_f32(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = base::f16_to_f32(src[i]);
}

void dequantize_row_bf16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = base::bf16_to_f32(src[i]);
}

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = base::f16_to_f32(blocks[b].d);
    float* y = dst + b * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = d * static_cast<float>((blocks[b].qs[j] & 0x0f) - 8);
      y[j + kQK4_0 / 2] = d * static_cast<float>((blocks[b].qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    const float d = base::f16_to_f32(blocks[b].d);
    const float m = base::f16_to_f32(blocks[b].m);
    float* y = dst + b * kQK4_1;
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = d * static_cast<float>(blocks[b].qs[j] & 0x0f) + m;
      y[j + kQK4_1 / 2] = d * static_cast<float>(blocks[b].qs[j] >> 4) + m;
    }
  }
}

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float d = base::f16_to_f32(blocks[b].d);
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    float* y = dst + b * kQK5_0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int high0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int high1 = static_cast<int>((qh >> (j + kQK5_0 / 2)) & 1u) << 4;
      y[j] = d * static_cast<float>(((blocks[b].qs[j] & 0x0f) | high0) - 16);
      y[j + kQK5_0 / 2] = d * static_cast<float>(((blocks[b].qs[j] >> 4) | high1) - 16);
    }
  }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    const float d = base::f16_to_f32(blocks[b].d);
    const float m = base::f16_to_f32(blocks[b].m);
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    float* y = dst + b * kQK5_1;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int high0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int high1 = static_cast<int>((qh >> (j + kQK5_1 / 2)) & 1u) << 4;
      y[j] = d * static_cast<float>((blocks[b].qs[j] & 0x0f) | high0) + m;
      y[j + kQK5_1 / 2] = d * static_cast<float>((blocks[b].qs[j] >> 4) | high1) + m;
    }
  }
}

void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    const float d = base::f16_to_f32(blocks[b].d);
    float* y = dst + b * kQK4_NL;
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j] = d * static_cast<float>(kIQ4Values[blocks[b].qs[j] & 0x0f]);
      y[j + kQK4_NL / 2] = d * static_cast<float>(kIQ4Values[blocks[b].qs[j] >> 4]);
    }
  }
}

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float d = base::f16_to_f32(blocks[b].d);
    for (int j = 0; j < kQK8_0; ++j) dst[b * kQK8_0 + j] = d * static_cast<float>(blocks[b].qs[j]);
  }
}

void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& block = blocks[b];
    const float d = base::f16_to_f32(block.d);
    const float dmin = base::f16_to_f32(block.dmin);
    float* y = dst + b * kQK_K;
    // Four groups of 64 elements; each group's 32 qs bytes carry sub-block 2g in the low
    // nibbles and sub-block 2g+1 in the high nibbles.
    for (int64_t g = 0; g < 4; ++g) {
      const uint8_t* q = block.qs + 32 * g;
      uint8_t sc_lo, mn_lo, sc_hi, mn_hi;
      unpack_q4_k_scale(block.scales, 2 * g, sc_lo, mn_lo);
      unpack_q4_k_scale(block.scales, 2 * g + 1, sc_hi, mn_hi);
      const float d_lo = d * sc_lo, m_lo = dmin * mn_lo;
      const float d_hi = d * sc_hi, m_hi = dmin * mn_hi;
      for (int l = 0; l < 32; ++l) {
        y[64 * g + l] = d_lo * static_cast<float>(q[l] & 0x0f) - m_lo;
        y[64 * g + 32 + l] = d_hi * static_cast<float>(q[l] >> 4) - m_hi;
      }
    }
  }
}

void dequantize_row_q6_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& block = blocks[b];
    const float d = base::f16_to_f32(block.d);
    float* y = dst + b * kQK_K;
    // Two halves of 128 elements. Within a half, element l + 32*k (k = 0..3) takes its low
    // four bits from ql[l + 32*(k&1)] (low nibble for k<2, high for k>=2) and its high two
    // bits from qh[l] at bit 2k; sub-block scale index is l/16 + 2k.
    for (int64_t half = 0; half < 2; ++half) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      const int8_t* sc = block.scales + 8 * half;
      float* yh = y + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        yh[l] = d * static_cast<float>(sc[s] * q0);
        yh[l + 32] = d * static_cast<float>(sc[s + 2] * q1);
        yh[l + 64] = d * static_cast<float>(sc[s + 4] * q2);
        yh[l + 96] = d * static_cast<float>(sc[s + 6] * q3);
      }
    }
  }
}

namespace {

// One Q2_K block's kQK_K elements: element 128h + 32s + l is bits 2s of qs[32h + l], in
// sub-block (128h + 32s + l) / 16.
void dequantize_block_q2_k(const BlockQ2_K& block, float* y) {
  const float d = base::f16_to_f32(block.d);
  const float dmin = base::f16_to_f32(block.dmin);
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = block.scales[8 * h + 2 * s + half];
        const float dl = d * static_cast<float>(sc & 0x0f);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int q = (block.qs[32 * h + l] >> (2 * s)) & 3;
          y[128 * h + 32 * s + l] = dl * static_cast<float>(q) - ml;
        }
      }
    }
  }
}

}  // namespace

void dequantize_row_q2_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) dequantize_block_q2_k(blocks[b], dst + b * kQK_K);
}

namespace {

// One Q3_K block's kQK_K elements: element 128h + 32s + l has its low bits at 2s of
// qs[32h + l] and its high bit at bit 4h + s of hmask[l] (set: q as is; clear: q - 4), in
// sub-block (128h + 32s + l) / 16.
void dequantize_block_q3_k(const BlockQ3_K& block, float* y) {
  const float d = base::f16_to_f32(block.d);
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      const int bit = 4 * h + s;
      for (int half = 0; half < 2; ++half) {
        const float dl = d * static_cast<float>(unpack_q3_k_scale(block.scales, 8 * h + 2 * s + half) - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int low = (block.qs[32 * h + l] >> (2 * s)) & 3;
          const int q = low - (((block.hmask[l] >> bit) & 1) ? 0 : 4);
          y[128 * h + 32 * s + l] = dl * static_cast<float>(q);
        }
      }
    }
  }
}

}  // namespace

void dequantize_row_q3_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ3_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) dequantize_block_q3_k(blocks[b], dst + b * kQK_K);
}

void dequantize_row_q5_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& block = blocks[b];
    const float d = base::f16_to_f32(block.d);
    const float dmin = base::f16_to_f32(block.dmin);
    float* y = dst + b * kQK_K;
    // Sub-block j = 2g + k: low bits from nibble k of qs[32g + l], fifth bit j of qh[l].
    for (int64_t j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      unpack_q4_k_scale(block.scales, j, sc, mn);
      const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
      const uint8_t* q = block.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int code = ((q[l] >> shift) & 0x0f) | (((block.qh[l] >> j) & 1) << 4);
        y[32 * j + l] = dl * static_cast<float>(code) - ml;
      }
    }
  }
}

void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& block = blocks[b];
    const float d = base::f16_to_f32(block.d);
    float* y = dst + b * kQK_K;
    for (int64_t j = 0; j < 8; ++j) {
      const float dl = d * static_cast<float>(unpack_iq4_xs_scale(block, j) - 32);
      const uint8_t* q = block.qs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        y[32 * j + l] = dl * static_cast<float>(kIQ4Values[q[l] & 0x0f]);
        y[32 * j + 16 + l] = dl * static_cast<float>(kIQ4Values[q[l] >> 4]);
      }
    }
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeInfo info = ggml_type_info(type);
  if (!info.supported) {
    throw base::Unsupported("cannot dequantize tensor type " + ggml_type_name(type));
  }
  if (n < 0 || n % info.block_size != 0) {
    throw base::InvalidArgument("dequantize_row: " + std::to_string(n) + " elements is not a multiple of the " +
                                ggml_type_name(type) + " block size " + std::to_string(info.block_size));
  }
  switch (type) {
    case GgmlType::F32:
      return dequantize_row_f32(static_cast<const float*>(src), dst, n);
    case GgmlType::F16:
      return dequantize_row_f16(static_cast<const uint16_t*>(src), dst, n);
    case GgmlType::BF16:
      return dequantize_row_bf16(static_cast<const uint16_t*>(src), dst, n);
    case GgmlType::Q4_0:
      return dequantize_row_q4_0(src, dst, n);
    case GgmlType::Q4_1:
      return dequantize_row_q4_1(src, dst, n);
    case GgmlType::Q5_0:
      return dequantize_row_q5_0(src, dst, n);
    case GgmlType::Q5_1:
      return dequantize_row_q5_1(src, dst, n);
    case GgmlType::Q8_0:
      return dequantize_row_q8_0(src, dst, n);
    case GgmlType::IQ4_NL:
      return dequantize_row_iq4_nl(src, dst, n);
    case GgmlType::Q2_K:
      return dequantize_row_q2_k(src, dst, n);
    case GgmlType::Q3_K:
      return dequantize_row_q3_k(src, dst, n);
    case GgmlType::Q4_K:
      return dequantize_row_q4_k(src, dst, n);
    case GgmlType::Q5_K:
      return dequantize_row_q5_k(src, dst, n);
    case GgmlType::Q6_K:
      return dequantize_row_q6_k(src, dst, n);
    case GgmlType::IQ4_XS:
      return dequantize_row_iq4_xs(src, dst, n);
    default:
      break;
  }
  throw base::Unsupported("cannot dequantize tensor type " + ggml_type_name(type));
}

}  // namespace lm
