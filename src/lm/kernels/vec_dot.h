#pragma once
// Dot products of one weight row, in its GGML block format, with an f32 activation vector.
// These are the innermost loop of every matmul in the host; they live here, in one place,
// so that a faster version (SIMD, quantized activations) replaces them without touching the
// model code. vec_dot_reference() is the plain definition (dequantize the row, then an f32
// dot) that the fused fast path is tested against.
#include <cstdint>

#include "lm/weights/ggml_type.h"

namespace lm::kernels {

// sum_i dequant(row)[i] * x[i] over n elements (n a multiple of the block size).
float vec_dot_reference(GgmlType type, const void* row, const float* x, int64_t n);

// The same value computed block by block without materialising the dequantized row: codes
// are widened to f32 in SIMD registers (lm/kernels/simd_dot.h) and block scales factored out
// of each block's sum (for x = d*q + m: d*sum(q*x) + m*sum(x)). Agrees with the reference to
// float rounding (tests bound the error).
// Every supported format has a fused kernel; dot_by_blocks is the fallback for a format
// added without one. Unsupported types throw base::Unsupported naming the type.
float vec_dot(GgmlType type, const void* row, const float* x, int64_t n);

// The generic path: the row dequantized one super-block (or 256 elements of small blocks)
// at a time into a stack buffer (SIMD dequantizers, lm/kernels/simd_dequantize.h), each piece
// dotted with the f32 SIMD kernel. Correct for every supported format; slower than a fused
// kernel by the extra store and load.
float dot_by_blocks(GgmlType type, const void* row, const float* x, int64_t n);

// Plain f32 dot, shared by attention and the reference.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace lm::kernels
