#pragma once
// Activations quantized to 16-bit integers for the decode matmuls, so that the weight ·
// activation dot products of the quantized formats run on integer multiply-adds (weight codes
// widened to i16, pairs multiplied and summed into i32: pmaddwd on x86, ReorderWidenMul-
// Accumulate in Highway) instead of widening every weight code to f32.
//
// Why 16 bits and not 8 as llama.cpp's q8 activation blocks: with 8 bits the rounding of the
// activations moved SmolLM2's logits by up to 0.8 and changed 2% of its top-1 tokens against
// the exact forward (tests/lm/reference_agreement_test.cpp). 16 bits make that error ~256x
// smaller — float-rounding level, so decode keeps agreeing with prefill and the exact forward —
// for about the same instruction count per weight.
//
// Block b covers x[32b, 32b + 32): q[i] = round_half_even(x[i] / d), d = max|x| / 32767 (0
// for an all-zero block, with all q = 0), and sum = d * sum(q) — what the formats with a block
// minimum (Q4_1, Q4_K) and the Q4_0 / Q6_K offsets multiply.
//
// vec_dot_i16 is the fast kernel (lm/kernels/simd_dot_i16.cpp); vec_dot_i16_reference is its
// definition (dequantize the weight row and the blocks, sum in double) that tests compare it
// with; the f32 kernels of vec_dot.h remain the reference for the whole approximation.
#include <cstddef>
#include <cstdint>

#include "lm/weights/ggml_type.h"

namespace lm::kernels {

inline constexpr int kI16Block = 32;

struct I16Block {
  float d;    // scale
  float sum;  // d * sum(q)
  int16_t q[kI16Block];
};
static_assert(sizeof(I16Block) == 72);

// Whether `type` has an integer dot product against I16 blocks (every quantized block format).
bool has_i16_dot(GgmlType type);

// Quantizes n floats (n a multiple of 32) into n / 32 blocks.
void quantize_i16(const float* x, int64_t n, I16Block* out);
// The same, one element at a time (std::nearbyint, ties to even): the fast version's definition.
void quantize_i16_reference(const float* x, int64_t n, I16Block* out);

// sum_i dequant(row)[i] * (d_b * q_i) over n elements (n a multiple of the format's block
// size). Throws base::Unsupported for a type without has_i16_dot.
float vec_dot_i16(GgmlType type, const void* row, const I16Block* x, int64_t n);
// vec_dot_i16 of n_rows rows row_bytes apart into y[0..n_rows): one dispatch for all (the
// matmul decode path). Same values as row-by-row vec_dot_i16.
void vec_dot_i16_rows(GgmlType type, const void* rows, std::size_t row_bytes, int64_t n_rows, const I16Block* x,
                      int64_t n, float* y);
float vec_dot_i16_reference(GgmlType type, const void* row, const I16Block* x, int64_t n);

}  // namespace lm::kernels
