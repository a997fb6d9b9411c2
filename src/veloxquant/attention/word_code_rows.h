#pragma once
// Unpacking a tile of word-layout code rows (core/bit_packing.h: 32 / b codes per u32, code i of
// a row in word i / per at bit b * (i % per)) to f32 for the attention driver, optionally read
// through a level table. CodeOrder::unpack_rows serves the planar widths (1, 2, 4, 8 bits) with
// SIMD; the others (3, 5, 6, 7 bits) it unpacks one code at a time, which made 3-bit kvquant
// spend half its decode instructions there. Here every 8-lane chunk is one gather of the words
// its codes sit in, one variable shift and a mask, then either a float conversion or the level
// lookup (attention/level_lookup.h's rule: a permute when 2^b levels fit the lanes, else a
// gather). Equal to the scalar reference below element for element.
#include <cstdint>

namespace veloxquant::attention::kernels {

// out[j * n + i] = code_i of row j (levels == nullptr) or levels[code_i of row j], for j < n_rows,
// i < n; row j's words start at first_row + j * row_stride_words. Codes are in natural order
// (the non-planar CodeOrder's order).
void unpack_word_rows(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, int64_t n, int bits,
                      const float* levels, float* out);

namespace scalar {
void unpack_word_rows(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, int64_t n, int bits,
                      const float* levels, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
