#pragma once
// Rows in the split-level layout (attention/split_level_key_scores.h: a few groups per row, each
// dense b-bit codes, b <= 4, on its own 2^b levels with one one-byte log scale) decoded to f32,
// a whole tile per call: what prefill tiles read (turboquant_block's split keys, and its log8
// value blocks, which are the same layout with one group per block). Prefill decodes each row
// once per query block of every chunk, so this decoder is on its hot path (it was ~40% of q3's
// cache-only prefill as per-row scalar unpacking and level lookups).
//
// SIMD (Highway, dispatched at run time), per group with its width known at compile time and its
// levels in registers: 16 codes (AVX-512; 8 on AVX2) read as one 8-byte word, spread to their
// lanes by one byte shuffle and one per-lane shift, masked, looked up by one lane permute
// (16 levels per register; AVX2: two 8-level tables), times the group's scale, plus the offset.
// A multiply and then an add, never fused (the file is built with -ffp-contract=off), as the
// scalar reference below and the per-row decode (SplitKeyCoder::decode, then the mean added)
// did: the SIMD rows equal them bit for bit.
#include <cstdint>

#include "veloxquant/attention/split_level_key_scores.h"

namespace veloxquant::attention::kernels {

// out[j * dim + offset_g + i] = scale_table[scale_j(g)] * levels_g[code_j(g, i)] (+ offset[offset_g + i],
// added after the product is rounded) for rows j < n_rows, groups g and i < channels_g, where dim
// = the sum of the groups' channels (groups must tile [0, dim): valid_split_level_rows).
// offset: nullptr or dim floats. Reads no byte past the last row's codes.
void decode_split_level_rows(const SplitLevelKeys& rows, const float* offset, float* out);

// Whether the layout is one decode_split_level_rows accepts: valid_split_level_keys, and the
// groups' offsets tile [0, sum of channels) in some order.
bool valid_split_level_rows(const SplitLevelKeys& rows);

// The row width: the sum of the groups' channels.
int64_t split_level_row_dim(const SplitLevelKeys& rows);

namespace scalar {
void decode_split_level_rows(const SplitLevelKeys& rows, const float* offset, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
