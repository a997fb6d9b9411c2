#pragma once
// Decoding a tile of rows of variable-width bit fields (each row the same layout: field i is
// widths[i] bits, packed LSB first right after field i - 1, as kvtc's DP-allocated component
// codes) to f32 values lo_i + step_i * code_i, for the attention driver.
//
// A field is at most 8 bits, so it lies in the two bytes from its first byte: every 8-lane chunk
// of fields is one gather of the 32-bit words at their first bytes, one variable shift, a mask
// and one FMA. The layout (first byte, shift, mask per field) is the same for every row, so it is
// built once when the widths are known, not per tile. The gather reads up to 3 bytes past a
// row's last byte: inside the tile for every row but the last, which is decoded from a padded
// copy. On AVX-512 VBMI (the AVX3_DL target) a row of at most 64 bytes is instead one masked
// load, and each 64 fields one byte permute (each 64-bit lane the 8 bytes from its first field's
// first byte), one multishift (every field's 8 bits from its bit offset) and a mask give the 64
// codes as bytes; then widen, convert and FMA 16 at a time. Equal to the scalar reference below
// element for element (both use one fused multiply-add per value).
#include <cstdint>
#include <vector>

namespace veloxquant::attention::kernels {

struct BitFieldLayout {
  std::vector<int32_t> first_byte, shift, mask;  // per field
  // The VBMI kernel's byte-code form (rows of at most 64 bytes), per 64-field chunk, 64 bytes a
  // table, padded with zeros past the last field: each 64-bit lane of a permuted row holds the 8
  // row bytes from the first byte of its first field (qword_bytes), the lane's 8 fields pulled
  // out by a multishift at their bit offsets from there (field_bit) and masked (field_mask).
  // Fields 4..7 of a lane whose bits pass the lane's 64 come from a second permute starting at
  // field 4's first byte (qword_bytes_hi, field_bit_hi), used only when `two_pass`.
  std::vector<uint8_t> qword_bytes, field_bit, field_mask, qword_bytes_hi, field_bit_hi;
  bool two_pass = false;
  int64_t row_bytes = 0;  // ceil(sum of widths / 8)

  // widths: n fields, each 0..8 bits (a 0-bit field decodes to lo_i + step_i * 0).
  static BitFieldLayout from_widths(const int32_t* widths, int64_t n);
  int64_t fields() const { return static_cast<int64_t>(first_byte.size()); }
};

// out[j * fields + i] = fma(code_i of row j, step[i], lo[i]) for j < n_rows, i < layout.fields();
// row j starts at first + j * stride (stride >= layout.row_bytes).
void decode_bit_field_rows(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                           const float* step, const float* lo, float* out);

// The same values laid out as a pair tile (attention/latent_pair_tiles.h) of n_rows rows (a
// multiple of 8) of layout.fields() elements, for the pair-tile scorer.
void decode_bit_field_pair_tile(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                                const float* step, const float* lo, float* tile);

// codes[j * code_stride + i] = code_i of row j (zero-extended) for i < layout.fields(), and 0
// for fields() <= i < code_stride; code_stride a multiple of 32 >= fields(). The integer key
// scorer's input (attention/code_row_scores.h).
void decode_bit_field_codes(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            int16_t* codes, int64_t code_stride);

// codes[j * code_stride + i] = code_i of row j as a byte for i < layout.fields(), and 0 for
// fields() <= i < code_stride; code_stride a multiple of 64 >= fields(). The integer value
// sums' input (attention/code_value_sums.h).
void decode_bit_field_bytes(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            uint8_t* codes, int64_t code_stride);

namespace scalar {
void decode_bit_field_codes(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            int16_t* codes, int64_t code_stride);
void decode_bit_field_rows(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                           const float* step, const float* lo, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
