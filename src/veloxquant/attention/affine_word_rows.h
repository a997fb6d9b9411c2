#pragma once
// Decoding a tile of group-affine rows stored as packed words (core/bit_packing.h's layout:
// floor(32 / b) codes per u32 word, LSB first, none straddling two words) followed by one (scale, min) f16 pair per
// channel group — the rows of an evicting cache with kivi-style values (eviction/row_codec.h) — to f32 for the
// attention driver: every row of the tile in one call instead of unpacking codes one by one per row.
//
// The SIMD path takes 4-bit and 2-bit codes: one u32 word broadcast to 8 lanes, a per-lane shift
// and a mask give 8 codes, then one FMA with the group's scale and min.
#include <cstddef>
#include <cstdint>

namespace veloxquant::attention::kernels {

struct AffineWordRows {
  const std::byte* first_row = nullptr;  // row j at first_row + j * row_bytes (no alignment)
  int64_t row_bytes = 0;
  int64_t params_offset = 0;  // bytes from a row's start to its (scale, min) f16 pairs
  int64_t n_rows = 0;
  int64_t dim = 0;
  int bits = 0;       // 1..8
  int64_t group = 0;  // channels per (scale, min)
};

// out[j * dim + e] = code_j(e) * scale_j(e / group) + min_j(e / group), j < n_rows, e < dim.
void decode_affine_word_rows(const AffineWordRows& rows, float* out);

namespace scalar {
void decode_affine_word_rows(const AffineWordRows& rows, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
