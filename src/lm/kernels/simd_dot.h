#pragma once
// SIMD inner loops (Highway, dispatched at run time to the best target the CPU has: AVX-512,
// AVX2, SSE4, NEON, ... or a portable fallback). Each has a plain scalar counterpart that
// tests compare it with: vec_dot_reference for the weight formats, straightforward loops for
// the rest. Activations stay f32; weights are widened to f32 in registers block by block, so
// results match the reference to float rounding.
#include <cstdint>

namespace lm::kernels::simd {

// Weight row (GGML block format) · f32 vector; n a multiple of the format's block size.
float dot_f32(const float* w, const float* x, int64_t n);
float dot_f16(const uint16_t* w, const float* x, int64_t n);
float dot_bf16(const uint16_t* w, const float* x, int64_t n);
float dot_q4_0(const void* row, const float* x, int64_t n);
float dot_q4_1(const void* row, const float* x, int64_t n);
float dot_q8_0(const void* row, const float* x, int64_t n);
float dot_q4_k(const void* row, const float* x, int64_t n);
float dot_q6_k(const void* row, const float* x, int64_t n);
float dot_q5_0(const void* row, const float* x, int64_t n);
float dot_q5_k(const void* row, const float* x, int64_t n);
float dot_q5_1(const void* row, const float* x, int64_t n);
float dot_iq4_nl(const void* row, const float* x, int64_t n);
float dot_iq4_xs(const void* row, const float* x, int64_t n);
float dot_q2_k(const void* row, const float* x, int64_t n);
float dot_q3_k(const void* row, const float* x, int64_t n);

// out[k] = dot(row k, x) for four f32 rows at w + k * stride (the prefill micro-kernel).
void dot_f32_rows4(const float* w, int64_t stride, const float* x, int64_t n, float* out);

// out[t * 4 + k] = dot(row k, x_t) for four rows (w + k * w_stride) and four x vectors
// (x + t * x_stride): the 4x4 register-tiled prefill micro-kernel.
void dot_f32_rows4x4(const float* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t n, float* out);

// out[i] += a * v[i] with v in f32 / f16 / bf16 (the value side of attention).
void axpy_f32(float a, const float* v, float* out, int64_t n);
void axpy_f16(float a, const uint16_t* v, float* out, int64_t n);
void axpy_bf16(float a, const uint16_t* v, float* out, int64_t n);

// Prefill attention tiles: s[c] = sum_e q[e] * kt[e * ld + c], c < cols, with cols and ld
// multiples of 64 (zero-padded). The multi-query tile kernels are in attention_tiles.h.
void scores_transposed(const float* q, const float* kt, int64_t ld, int64_t d, int64_t cols, float* s);

// s[i] = exp(s[i] - shift) for i < n (exp(-inf) = 0); returns the sum.
float exp_shifted_sum(float* s, int64_t n, float shift);

// Row conversions to f32 (attention tiles).
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);

}  // namespace lm::kernels::simd
