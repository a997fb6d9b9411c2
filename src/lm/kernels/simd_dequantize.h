#pragma once
// SIMD row dequantizers (Highway, dispatched at run time) for every quantized block format
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K ... Q6_K, IQ4_XS), whose scalar dequantizers
// (lm/weights/dequantize.h) spend 3-16 instructions per element on bit unpacking. They compute the same IEEE operations
// in the same order as the scalar references (f16 -> f32 scale, integer code -> f32, one product, one sum), and the
// file is compiled with -ffp-contract=off so no product and sum are fused, so their output is bit-identical to the
// reference (tests compare every target bit for bit).
//
// Used where whole rows are dequantized on the hot path: the prefill matmul (one row
// dequantized, then dotted with every token) and kernels::dot_by_blocks.
#include <cstdint>

#include "lm/weights/ggml_type.h"

namespace lm::kernels {

// Whether `type` has a SIMD dequantizer here.
bool has_simd_dequantize(GgmlType type);

// Dequantizes n elements (n a multiple of the block size) of `type`: the SIMD version where
// has_simd_dequantize(type), lm::dequantize_row otherwise (so every supported type works).
void dequantize_row_fast(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace lm::kernels
