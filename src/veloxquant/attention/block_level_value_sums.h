#pragma once
// Block-scaled level values (turboquant_block's rows, quant/block_lloyd_quant.h) accumulated
// into attention outputs straight from their codes (Highway, dispatched at run time; the SIMD
// loop matches its scalar reference bit for bit).
//
// Decoding a tile of values to f32 scratch and then accumulating it stores and reloads every
// element once more than needed and multiplies each by its block scale. Here each row's codes
// are looked up as f16 levels in registers (dense_code_lookup-inl.h), widened, and added into
// the outputs with one FMA per element and query, the row's weight already multiplied by its
// block scale:
//
//   acc[r][e] = fma(level[code_j(e)], w[r][j] * s_j(block of e), acc[r][e])   for j in order
//
// The outputs of a chunk of 16 or 32 coordinates stay in registers while every row of the tile
// passes; the chunks then take turns.
//
// Codes of up to 6 bits on evenly spaced levels (even_levels: turboquant_block's levels=uniform;
// 8-bit even codes keep their own loop),
// level(c) = (2c - m) / 2^b with m = 2^b - 1, skip the lookup: the codes are widened to f32 as
// they are, and the part every code of a block shares is added once per call:
//
//   ws2[r][j][b] = w[r][j] * (s_jb * (2 / 2^b))
//   acc[r][e]    = fma(float(c_j(e)), ws2[r][j][b(e)], acc[r][e])      for j in order
//   acc[r][e]    = fma(-m / 2, sum over j in order of ws2[r][j][b(e)], acc[r][e])   once, at the end
#include <cstdint>

namespace veloxquant::attention::kernels {

struct BlockLevelValues {
  const uint8_t* codes = nullptr;  // row j's codes at codes + j * code_stride (dense, LSB first)
  int64_t code_stride = 0;
  const uint16_t* scales = nullptr;  // row j's dim / block f16 scales at scales + j * (dim / block)
  int64_t n_rows = 0;
  int64_t dim = 0;
  int bits = 0;
  int64_t block = 32;
  const uint16_t* levels_f16 = nullptr;  // the 2^bits levels as f16 bits
  // 8 bits: the levels are (2c - 255) / 256 (turboquant_block from 7 bits on), so the loop
  // computes each level from its code instead of looking it up (required for bits == 8).
  bool even_levels = false;
  // Optional (dim floats): a row every value shares, e.g. turboquant_block's rotated value mean
  // (values stored as v - mu). Added once per call with the tile's weight total instead of once
  // per row: acc[r][e] = fma(total_r, offset[e], acc[r][e]) after the rows, where total_r sums
  // the weights of query r in eight partial sums p_k (rows j = k mod 8, in order), combined as
  // ((p0 + p4) + (p1 + p5)) + ((p2 + p6) + (p3 + p7)).
  const float* offset = nullptr;
};

// Whether values of this shape take accumulate_block_level_rows on this machine: bits 1..6, or
// 8 with even levels, whole blocks of 32 coordinates, a 256-bit SIMD target. Otherwise a caller decodes to f32
// (dense_level_rows.h).
bool can_accumulate_block_level_rows(int bits, int64_t dim, int64_t block);

// acc[r * acc_stride + e] += sum over rows j < n_rows of weights[r * ld + j] * value_j[e] for
// queries r < n_q, in the order above.
void accumulate_block_level_rows(const BlockLevelValues& values, const float* weights, int64_t ld, int64_t n_q,
                                 float* acc, int64_t acc_stride);

namespace scalar {
void accumulate_block_level_rows(const BlockLevelValues& values, const float* weights, int64_t ld, int64_t n_q,
                                 float* acc, int64_t acc_stride);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
