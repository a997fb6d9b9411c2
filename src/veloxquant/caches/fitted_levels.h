#pragma once
// Non-uniform quantization levels fitted to the data (KVQuant's "nuq" datatypes, Hooper et al.,
// arXiv 2401.18079 §3.3), in the frame of KIVI's group-affine code: a group keeps its f16
// (scale, min) with scale = (max - min) / (2^b - 1), so each element has a normalized coordinate
// u = (x - min) / scale in [0, 2^b - 1]; KIVI rounds u to the integers, here u goes to the
// nearest of 2^b fitted levels l_0 < ... < l_{2^b-1} and decodes as min + scale * l_code. With the
// identity levels (l_i = i) this is KIVI's code exactly, so the attention kernels read both
// alike (the codes are mapped through a 2^b-entry table after unpacking).
//
// Fit: 1-D Lloyd (k-means) on the u of one head's first flushed block, starting from the identity
// levels; each iteration assigns every u to its nearest level (boundaries at the midpoints, a
// value on a boundary goes down) and moves each level to the mean of its cell (a cell left empty
// keeps its level). Means are taken in double so the result does not depend on summation order.
#include <cstddef>
#include <cstdint>

#include "veloxquant/core/group_quant.h"

namespace veloxquant {

// n_levels fitted levels (ascending) for the values u[0..n) after `iterations` Lloyd steps.
void fit_levels(const float* u, std::size_t n, int n_levels, int iterations, float* levels);
// Index of the nearest level (number of midpoints strictly below u).
uint8_t nearest_level(float u, const float* levels, int n_levels);
// Codes of a group already given its params: codes[i * stride] = nearest_level((x - min) / scale).
void encode_group_levels(const float* x, std::size_t count, std::size_t stride, core::GroupParams params,
                         const float* levels, int n_levels, uint8_t* codes);
// The normalized coordinates of a group, clamped to [0, n_levels - 1], appended to `out`.
void append_normalized(const float* x, std::size_t count, std::size_t stride, core::GroupParams params, int n_levels,
                       float* out);

}  // namespace veloxquant
