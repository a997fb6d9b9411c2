#pragma once
// svdq's latent rows (caches/svdq_layout.h) decoded to f32 for the attention tile: a row's coded
// channels, group by group, code * scale + min with the block's per-channel (scale, min).
//
// A group of exactly 8 channels at 1, 2, 4 or 8 bits — every group at head_dim 64 — is one vector
// of 8 lanes (Highway, dispatched at run time): its dense codes are one u8 / u16 / u32 / 8 bytes,
// broadcast, shifted per lane and masked, then one multiply-add. Other groups take the scalar
// loop, which is also the reference the SIMD path matches exactly (the same multiply-add per
// element).
#include <cstdint>

#include "veloxquant/caches/svdq_layout.h"

namespace veloxquant {

// Rows j < n_rows (row j at first_row + j * row_bytes) into out[j * layout.coded + i].
void decode_latent_rows(const SvdqLayout& layout, const uint8_t* first_row, int64_t row_bytes, int64_t n_rows,
                        const float* scale, const float* min, float* out);

namespace scalar {
// One group's n dense b-bit codes (LSB first) to code * scale[i] + min[i].
void decode_group(const uint8_t* codes, int64_t n, int bits, const float* scale, const float* min, float* out);
void decode_latent_rows(const SvdqLayout& layout, const uint8_t* first_row, int64_t row_bytes, int64_t n_rows,
                        const float* scale, const float* min, float* out);
}  // namespace scalar

}  // namespace veloxquant
