#pragma once
// SIMD kernels behind lm/kernels/i16_activations.h (Highway, dispatched at run time): the
// activation quantizer and the integer dot products of each quantized weight format with
// I16 activation blocks. Weight codes are widened to i16 and multiplied with the activations
// in pairs summed into i32 lanes (ReorderWidenMulAccumulate: pmaddwd on x86); integer sums are
// exact, only the per-block scaling rounds.
#include <cstddef>
#include <cstdint>

#include "lm/kernels/i16_activations.h"

namespace lm::kernels::simd {

void quantize_i16(const float* x, int64_t n, I16Block* out);

float dot_i16_q4_0(const void* row, const I16Block* x, int64_t n);
float dot_i16_q4_1(const void* row, const I16Block* x, int64_t n);
float dot_i16_q8_0(const void* row, const I16Block* x, int64_t n);
float dot_i16_q4_k(const void* row, const I16Block* x, int64_t n);
float dot_i16_q6_k(const void* row, const I16Block* x, int64_t n);
float dot_i16_q5_0(const void* row, const I16Block* x, int64_t n);
float dot_i16_q5_k(const void* row, const I16Block* x, int64_t n);
float dot_i16_q5_1(const void* row, const I16Block* x, int64_t n);
float dot_i16_iq4_nl(const void* row, const I16Block* x, int64_t n);
float dot_i16_iq4_xs(const void* row, const I16Block* x, int64_t n);
float dot_i16_q2_k(const void* row, const I16Block* x, int64_t n);
float dot_i16_q3_k(const void* row, const I16Block* x, int64_t n);
// y[r] = dot_i16_<type>(rows + r * row_bytes, x, n) for r < n_rows (type has_i16_dot).
void dot_i16_rows(GgmlType type, const void* rows, std::size_t row_bytes, int64_t n_rows, const I16Block* x, int64_t n,
                  float* y);

}  // namespace lm::kernels::simd
