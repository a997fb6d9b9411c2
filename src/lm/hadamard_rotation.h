#pragma once
// llama.cpp's attention rotation for quantized KV caches (ggml-org/llama.cpp PR 21038, on by
// default since April 2026 whenever -ctk/-ctv pick a quantized type and the head dim is a
// multiple of 64): queries, keys and values are multiplied by H, the Sylvester Hadamard matrix
// of order 64 scaled by 1/8, before keys and values are quantized; attention runs in the
// rotated basis and its output is multiplied by H again. H is orthonormal (scores q·k are
// unchanged), symmetric and its own inverse; it spreads a few large channels over all 64, so a
// block's scale is no longer set by one outlier.
#include <cstdint>

namespace lm {

inline constexpr int64_t kHadamardOrder = 64;

// True when rows of `dim` elements are rotated (a positive multiple of 64).
bool hadamard_rotates(int64_t dim);
// x <- H x for every block of 64 consecutive elements of x[0, dim) (fast Walsh-Hadamard
// butterflies, then the 1/8 scale); dim a multiple of 64.
void hadamard_rotate(float* x, int64_t dim);

}  // namespace lm
