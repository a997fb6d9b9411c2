#pragma once
// The KIVI-family group code in the storage form of the serving caches: b-bit codes packed in
// the word layout (core/bit_packing.h), per-group (scale, min) in f16 — the numerics are
// core/group_quant.h (spec §11.9; f16 params as in the KIVI paper, chosen before the codes so
// the codes are the best ones for the parameters actually stored). This file only adapts them
// to the caches' row-at-a-time, packed layout.
#include <cstddef>
#include <cstdint>

#include "veloxquant/core/group_quant.h"

namespace veloxquant {

using GroupParams16 = core::GroupParams;

// One code back to its value: code * scale + min, in f32.
float decode_code(uint8_t code, GroupParams16 params);

// One token row of `dim` values quantized per token in channel groups of `group` (a short last
// group keeps the same codes the original's last-element padding gives). Words:
// packed_words(dim, bits); params: token_groups(dim, group) entries.
std::size_t token_groups(int dim, int group);
void encode_token_row(const float* x, int dim, int group, int bits, uint32_t* words, GroupParams16* params);
void decode_token_row(const uint32_t* words, const GroupParams16* params, int dim, int group, int bits, float* out);

}  // namespace veloxquant
