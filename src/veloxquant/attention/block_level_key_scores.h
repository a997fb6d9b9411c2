#pragma once
// Block-scaled level keys (turboquant_block's rows, quant/block_lloyd_quant.h: dense b-bit codes
// on 2^b fixed levels, one f16 scale per block of coordinates) scored as integer dot products
// (Highway, dispatched at run time; the SIMD loop matches its scalar reference bit for bit).
//
// Decoding a tile of such keys to f32 and scoring it costs a level lookup, a widening, a scale
// multiply and a store per element, then a load and an FMA per element and query. Here the
// levels are rounded once to 16-bit integers of one step (levels16), the query once per call
// (q16), and a row costs the same in-register lookup the decoder uses
// (dense_code_lookup-inl.h) plus pairwise 16x16->32-bit multiply-adds, 16 products per
// instruction. Each block's exact integer lane sums meet its f16 scale once, in f32:
//
//   T_bl(r, j)  = sum over the block-b elements e of lane l of q16[r][e] * level16[code_j(e)]
//   acc_l       = fma(T_bl, s_jb, acc_l) over blocks b in order                  (8 lanes)
//   score(r, j) = (q_step[r] * level_step) * lane_sum(acc) + bias[r]
//
// where lane l holds elements 16p + 2l and 16p + 2l + 1 of every pass p of 16 codes (x86's
// multiply-add layout) and lane_sum adds the 8 lanes in a fixed tree (integer_row_sums-inl.h).
// Both roundings share the 32-bit budget of a lane sum (block / 8 products of |q16| x
// |level16|): each gets floor(sqrt((2^31 - 1) / (block / 8))), 23170 for blocks of 32, a
// relative error of ~2e-5 of the largest element, far below the codes' own error.
#include <cstdint>

namespace veloxquant::attention::kernels {

// The tile of rows to score. Row j's codes lie at codes + j * code_stride (dense, LSB first,
// ceil(dim * bits / 8) bytes), its dim / block f16 scales at scales + j * (dim / block).
struct BlockLevelKeys {
  const uint8_t* codes = nullptr;
  int64_t code_stride = 0;
  const uint16_t* scales = nullptr;
  int64_t n_rows = 0;
  int64_t dim = 0;
  int bits = 0;
  int64_t block = 32;
};

// The largest |q16| and |level16| for blocks of `block` elements.
int32_t block_integer_limit(int64_t block);

// Codes on evenly spaced levels are scored without a table: the codes multiply the doubled query
// 2 q16, which needs |q16| <= kUniformQueryLimit (a query with a larger element takes the table
// path; the result is the same). Callers with even levels round the query to
// min(block_integer_limit(block), kUniformQueryLimit).
inline constexpr int32_t kUniformQueryLimit = 16383;

// The 2^bits levels rounded to integers of one step: value[c] = round(levels[c] / step),
// step = max |level| / limit. Evenly spaced levels (2c - (2^b - 1)) / 2^b (turboquant_block from
// 7 bits on) are kept exactly instead: value[c] = 2c - (2^b - 1), step = 2^-b, even = true.
// symmetric: value[2^bits - 1 - c] == -value[c] for every c (Lloyd levels are solved symmetric),
// which lets the SIMD loop look codes up in half a table; the integers are the same.
struct BlockLevels16 {
  int16_t value[256];
  float step;
  bool even;
  bool symmetric = false;
};
BlockLevels16 block_levels16(const float* levels, int bits, int32_t limit);

// Whether rows of this shape take score_block_level_rows on this machine: bits 1..6 (levels in
// registers) or 8 (evenly spaced levels, computed from the code), whole blocks of 16-code
// passes, a 256-bit x86 SIMD target. Otherwise a caller decodes to f32 (dense_level_rows.h).
bool can_score_block_level_rows(int bits, int64_t dim, int64_t block);

// A query rounded to 16 bits in its own order: q16[e] = round(q[e] / step), step = max |q| /
// limit (0 for a zero query, NaN for a non-finite one).
void quantize_query_i16(const float* q, int64_t d, int32_t limit, int16_t* q16, float* step);

// scores[r * ld + j] = score(r, j) above for rows j < keys.n_rows and queries r < n_q (q16 + r *
// dim, q_step[r], bias[r]; bias nullptr: 0).
void score_block_level_rows(const BlockLevelKeys& keys, const BlockLevels16& levels, const int16_t* q16,
                            const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld);

// Codes of 1..3 bits on any 2^bits levels scored in f32 against the f32 query (no rounding of
// either): the levels held in one register, 8 codes spread to their lanes by one 32-bit
// broadcast and one variable shift and looked up by one lane permute, then one FMA per 8
// elements and query (the query read from memory). Cheaper than the integer loop's byte-table
// lookup for such narrow codes (turboquant_block's 3-bit keys in the q3 preset). In lanes l < 8
// (element 8g + l of group g):
//
//   t_b[l]       = fma(level[code_j(8g + l)], q[r][8g + l], t_b[l]) over the groups g of block b
//                  in order (the first a product)
//   acc[l]       = fma(t_b[l], s_jb, acc[l]) over blocks b in order (the first a product)
//   score(r, j)  = (((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7))) + bias[r]
//
// levels: the 2^bits levels as f32; query r at q + r * q_stride (dim floats).
bool can_score_permuted_level_rows(int bits, int64_t dim, int64_t block);
void score_permuted_level_rows(const BlockLevelKeys& keys, const float* levels, const float* q, int64_t q_stride,
                               const float* bias, int64_t n_q, float* scores, int64_t ld);

namespace scalar {
void score_permuted_level_rows(const BlockLevelKeys& keys, const float* levels, const float* q, int64_t q_stride,
                               const float* bias, int64_t n_q, float* scores, int64_t ld);
void score_block_level_rows(const BlockLevelKeys& keys, const BlockLevels16& levels, const int16_t* q16,
                            const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
