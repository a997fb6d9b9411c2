#pragma once
// 8-bit codes on evenly spaced levels (turboquant_block's keys from 7 bits on: the q8 preset),
// level(c) = (2c - 255) / 256, one f16 scale per block of 32, scored against a 16-bit query as
// integer dot products four bytes at a time (x86 AVX-512 VNNI: vpdpbusd; the SIMD loop matches
// its scalar reference bit for bit).
//
// block_level_key_scores.h scores these rows too, 16 codes per pass through 16-bit multiplies;
// on a machine with VNNI this file's loop reads a row's 64 codes as they are stored (one load),
// multiplies them with the query's two bytes q16 = 256 qh + ql (two vpdpbusd), and sums blocks,
// not lanes, so its integer model is its own:
//
//   R_b(r, j)   = sum over the elements e of block b of q16[r][e] * c_j(e)             (exact)
//   T_b(r, j)   = 2 R_b - 255 * (sum over block b of q16[r][e])   = sum q16 * (2c - 255) (exact)
//   acc(r, j)   = float(T_0) * s_j0 + float(T_1) * s_j1      (each product rounded, then added)
//   score(r, j) = fma(acc, q_step[r] / 256, bias[r])
//
// The query is rounded once per call to |q16| <= kEvenByteQueryLimit (its two bytes then stay
// within int8), a relative error of ~1.5e-5 of its largest element, far below the codes' own.
#include <cstdint>

#include "veloxquant/attention/block_level_key_scores.h"

namespace veloxquant::attention::kernels {

inline constexpr int32_t kEvenByteQueryLimit = 32639;  // 127 * 257: q16 - (int8)q16 fits qh * 256

// Whether rows of this shape take score_even_byte_rows on this machine: 8-bit codes, head size 64
// in blocks of 32, an x86 CPU with AVX-512 VBMI and VNNI. Otherwise block_level_key_scores.h.
bool can_score_even_byte_rows(int bits, int64_t dim, int64_t block);

// scores[r * ld + j] = score(r, j) above for rows j < keys.n_rows and queries r < n_q (q16 + r *
// dim, rounded by quantize_query_i16 with kEvenByteQueryLimit; q_step[r]; bias[r], nullptr: 0).
void score_even_byte_rows(const BlockLevelKeys& keys, const int16_t* q16, const float* q_step, const float* bias,
                          int64_t n_q, float* scores, int64_t ld);

namespace scalar {
void score_even_byte_rows(const BlockLevelKeys& keys, const int16_t* q16, const float* q_step, const float* bias,
                          int64_t n_q, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
