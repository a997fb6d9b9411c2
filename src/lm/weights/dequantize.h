#pragma once
// Plain scalar dequantization, one function per format: the reference every fused kernel
// (lm/kernels) is tested against, and what embedding lookups use for a single row.
#include <cstdint>

#include "lm/weights/ggml_type.h"

namespace lm {

// Expands `n` consecutive elements starting at `src` (the first byte of a block) into f32.
// n must be a multiple of the type's block size (base::InvalidArgument otherwise);
// unsupported types throw base::Unsupported naming the type.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// The per-format references (n a multiple of the block size).
void dequantize_row_f32(const float* src, float* dst, int64_t n);
void dequantize_row_f16(const uint16_t* src, float* dst, int64_t n);
void dequantize_row_bf16(const uint16_t* src, float* dst, int64_t n);
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_row_q2_k(const void* src, float* dst, int64_t n);
void dequantize_row_q3_k(const void* src, float* dst, int64_t n);
void dequantize_row_q4_k(const void* src, float* dst, int64_t n);
void dequantize_row_q5_k(const void* src, float* dst, int64_t n);
void dequantize_row_q6_k(const void* src, float* dst, int64_t n);
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n);

}  // namespace lm
