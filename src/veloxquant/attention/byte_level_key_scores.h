#pragma once
// Block-scaled level keys (turboquant_block's rows: dense b-bit codes on 2^b fixed levels, one
// f16 scale per block of 32 coordinates) scored as 8-bit integer dot products, 32 codes per
// instruction pass (x86 AVX2: the SIMD loop matches its scalar reference bit for bit).
//
// block_level_key_scores.h multiplies 16-bit query and level integers, 16 codes per pass. Here
// both are rounded to 8 bits, as llama.cpp scores q4_0 keys against a q8_0 query: the query
// once per call (q8, |q8| <= 127, one step per query), the levels once per cache (level8 =
// round(level / max|level| * 127)). A pass turns 32 codes into bytes (two byte shuffles, two
// multiplies and shifts, one blend), looks their int8 levels up in registers (one byte shuffle
// per 16 levels), and multiplies them with the query by vpmaddubsw on |q8| and level8 * sign(q8),
// then vpmaddwd with ones to 32 bits: four instructions per query and 32 codes against four per
// 16 codes in the 16-bit loop. Every block's sum is an exact integer (at most 32 * 127 * 127):
//
//   T_b(r, j)   = sum over the elements e of block b of q8[r][e] * level8[code_j(e)]   (exact)
//   acc(r, j)   = sum over blocks b in order of float(T_b) * s_jb     (products, then adds)
//   score(r, j) = fma(q_step[r] * level_step, acc, bias[r])
//
// The cost of the rounding is measured, not assumed: on Gaussian blocks the 5-bit levels rounded
// to 8 bits add 1.9% to the codes' MSE (3 bits: nothing), and the 8-bit query adds an error of
// about 2% of the 5-bit keys' own to each score (docs/methods/turboquant_block.md has the KL).
// 6-bit codes (64 levels, four tables and three blends a pass) are scored exactly as well, but
// their levels lose more to the rounding: turboquant_block's q5 rose 16% in decode-like KL, so it
// keeps them on the 16-bit scorer.
#include <cstdint>

#include "veloxquant/attention/block_level_key_scores.h"

namespace veloxquant::attention::kernels {

// The 2^bits levels rounded to int8 of one step: value[c] = round(levels[c] / step),
// step = max |level| / 127.
struct ByteLevels {
  int8_t value[64];
  float step;
  // value[c mod 2^bits] + 128 for c < 64: the 512-bit loop's lookup table (a byte permute reads
  // six index bits; unsigned levels for vpdpbusd).
  uint8_t offset_table[64];
};
ByteLevels byte_levels(const float* levels, int bits);

// Whether rows of this shape take score_byte_level_rows on this machine: bits 2..6, head size
// 64 in blocks of 32 (two blocks per row), an x86 AVX2 target. Otherwise a caller takes
// block_level_key_scores.h.
bool can_score_byte_level_rows(int bits, int64_t dim, int64_t block);

// A query rounded to 8 bits: q8[e] = round(q[e] / step), step = max |q| / 127 (0 for a zero
// query, NaN for a non-finite one, whose values are then 0), and abs_q8[e] = |q8[e]|.
void quantize_query_i8(const float* q, int64_t d, int8_t* q8, uint8_t* abs_q8, float* step);

// scores[r * ld + j] = score(r, j) above for rows j < keys.n_rows and queries r < n_q (q8 + r *
// dim and abs_q8 + r * dim, q_step[r], bias[r]; bias nullptr: 0).
void score_byte_level_rows(const BlockLevelKeys& keys, const ByteLevels& levels, const int8_t* q8,
                           const uint8_t* abs_q8, const float* q_step, const float* bias, int64_t n_q, float* scores,
                           int64_t ld);

namespace scalar {
void score_byte_level_rows(const BlockLevelKeys& keys, const ByteLevels& levels, const int8_t* q8,
                           const uint8_t* abs_q8, const float* q_step, const float* bias, int64_t n_q, float* scores,
                           int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
