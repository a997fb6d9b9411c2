#pragma once
// Decoding a tile of block-scaled Lloyd-Max rows (turboquant_block's storage,
// quant/block_lloyd_quant.h) to f32 for the attention driver: every row of the tile in one call,
// so the per-row work is the decode itself and nothing else.
//
// Codes are dense and LSB-first (code i of a row at bits [i*b, (i+1)*b)), so 8 codes always span
// exactly b bytes. Two SIMD paths (8 f32 lanes):
//   - levels that are exact f16 values (turboquant_block's) and b <= 6: 16 codes per pass in u16
//     lanes, levels looked up as f16 by byte shuffles from tables held in registers, widened by
//     the hardware conversion (dense_level_rows.cpp explains the steps);
//   - 8 bits on even levels (2c - 255) / 256: each level computed from its code (one FMA);
//   - any other levels, and 7-8 bits: 8 codes per group spread by one byte shuffle and a
//     per-lane shift, their f32 levels gathered.
// Both equal the scalar reference below (one FMA rounding apart when an offset is added).
#include <algorithm>
#include <cstdint>

namespace veloxquant::attention::kernels {

// The SIMD loops over dense codes (this decoder, block_level_key_scores.h,
// block_level_value_sums.h) load 16 bytes per pass of 16 codes, past the end of a row's codes
// when a pass is shorter. Rows whose loads would pass the tile's last code byte are read from a
// zero-padded copy of at most this many bytes.
constexpr int64_t kMaxCodeRowBytes = 1024;

// The first of n_rows rows (code_stride bytes apart, row_code_bytes of codes each) whose load of
// row_load_end bytes from its start would read past the last row's codes; n_rows when none.
inline int64_t first_padded_row(int64_t n_rows, int64_t code_stride, int64_t row_code_bytes, int64_t row_load_end) {
  const int64_t slack = (n_rows - 1) * code_stride + row_code_bytes - row_load_end;
  if (slack < 0) return 0;  // even row 0 (a one-row tile) reads past the end
  return std::min(n_rows, slack / code_stride + 1);
}

// Code i of a row of dense LSB-first b-bit codes, read bit by bit: the scalar references' reading
// (any b from 1 to 8, any i).
inline int dense_code(const uint8_t* packed, int64_t i, int bits) {
  int code = 0;
  for (int k = 0; k < bits; ++k) {
    const int64_t bit = i * bits + k;
    code |= ((packed[bit / 8] >> (bit % 8)) & 1) << k;
  }
  return code;
}

struct DenseLevelRows {
  const uint8_t* codes = nullptr;    // row j's codes at codes + j * code_stride
  int64_t code_stride = 0;           // bytes; >= ceil(dim * bits / 8)
  const uint16_t* scales = nullptr;  // row j's f16 block scales at scales + j * scale_stride
  int64_t scale_stride = 0;          // in scales; >= ceil(dim / block)
  int64_t n_rows = 0;
  int64_t dim = 0;
  int bits = 0;                   // 1..8
  int64_t block = 32;             // coordinates per scale
  const float* levels = nullptr;  // 2^bits levels
  // Optional: the same levels as f16 bits, when every level is an exact f16 value (the decoder
  // then keeps them in byte-shuffle tables without checking each call).
  const uint16_t* levels_f16 = nullptr;
  const float* offset = nullptr;  // optional: added to every row (a per-channel mean), dim floats
  // 8 bits: the caller knows the levels are (2c - 255) / 256 (else the decoder checks them).
  bool even_levels = false;
};

// out[j * dim + i] = f16(scale_j[i / block]) * levels[code_j(i)] (+ offset[i]) for j < n_rows,
// i < dim. Reads no byte past row n_rows - 1's ceil(dim * bits / 8) code bytes.
void decode_dense_level_rows(const DenseLevelRows& rows, float* out);

namespace scalar {
void decode_dense_level_rows(const DenseLevelRows& rows, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
