#pragma once
// Per-token group-affine values (KIVI's layout: b-bit codes per token, one (scale, min) per channel
// group of each token) accumulated straight from their words, and the per-tile weight scaling that
// every group-affine value path shares (Highway, dispatched at run time; each loop has a plain
// scalar reference that the SIMD one matches bit for bit).
//
// With weights w_j:  sum_j w_j v_jc = sum_j (w_j s_j,g(c)) code_jc + sum_j w_j m_j,g(c)
// so a tile needs, per channel group g and query r, the row weights scaled by each row's s_jg
// (group_weights) and the constant sum_j w_j m_jg, added once per group of channels after the rows
// (add_group_biases). The codes are then accumulated as they are.
//
// accumulate_word_values serves the widths that do not read by planes (3, 5, 6, 7 bits: kvquant's
// fitted 3-bit levels, adakv's 3-bit tier, kivi --bits 3). Before, those rows were unpacked into an
// f32 tile that the f32 accumulate read back (kvquant: ~145 instructions per row for the two
// passes). Here each 8-code chunk of a row is picked from the row's words by one in-register
// permute, shifted per lane, masked, turned into a float (or a level, by a second permute), and fed
// to the FMAs of all queries of the block while still in a register: no tile, no store.
#include <cstdint>

#include "veloxquant/attention/group_value_targets.h"

namespace veloxquant::attention::kernels {

// A tile's per-row (scale, min) f16 pairs — row j's `2 * groups` fields at params + j * param_stride
// (scale_g at 2g, min_g at 2g + 1) — folded into the weights of n_q queries:
//   scaled[(g * n_q + r) * n + j] = w[r * ld + j] * scale_jg,   bias[g * n_q + r] = sum_j w[r * ld + j] * min_jg.
// The bias sums run over j in order with one f32 FMA per row for each of 8 lanes (row j in lane
// j % 8), then the lanes are added pairwise (lane l + 4, then l + 2, then l + 1); the scalar
// reference does the same, so the two agree bit for bit. columns: scratch of 2 * groups * n floats.
void group_weights(const uint16_t* params, int64_t param_stride, int64_t n, int64_t groups, const float* w, int64_t ld,
                   int64_t n_q, float* columns, float* scaled, float* bias);

// out[r * out_stride + c] += bias[(c / group) * n_q + r] for c < d, r < n_q.
void add_group_biases(const float* bias, int64_t n_q, int64_t d, int64_t group, float* out, int64_t out_stride);

// Whether rows of `n` b-bit word-layout codes (core/bit_packing.h) in channel groups of `group`
// take accumulate_word_values: every 8-code chunk inside one channel group (n and group multiples
// of 8), at most 512 codes, and a level table, if any, of at most 8 entries (b <= 3).
bool can_accumulate_word_values(int bits, int64_t n, int64_t group, bool levels);

// A tile's rows of b-bit word-layout codes: row j's words at first_row + j * row_stride_words,
// code i in word i / (32/b) at bit b * (i % (32/b)), natural channels i < n in channel groups of
// `group` (g = i / group); `levels` (b <= 3) maps a code to its value, or null: the code itself.
struct WordValueRows {
  const uint32_t* first_row;
  int64_t row_stride_words;
  int64_t n_rows;
  int64_t n;
  int bits;
  int64_t group;
  const float* levels;
};

// For rows j < n_rows and channels i < n: first, when bias is given,
// acc[r * acc_stride + i] += bias[g * n_q + r] (the groups' sum_j w_j m_jg, so no second pass
// adds them), then
//   acc[r * acc_stride + i] = fma(ws[(g * n_q + r) * n_rows + j], x_j(i), acc[r * acc_stride + i])
// in row order, x_j(i) the code as a float or, with levels, levels[code].
void accumulate_word_values(const WordValueRows& rows, const GroupValueTargets& out);

namespace scalar {
void group_weights(const uint16_t* params, int64_t param_stride, int64_t n, int64_t groups, const float* w, int64_t ld,
                   int64_t n_q, float* columns, float* scaled, float* bias);
void add_group_biases(const float* bias, int64_t n_q, int64_t d, int64_t group, float* out, int64_t out_stride);
void accumulate_word_values(const WordValueRows& rows, const GroupValueTargets& out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
