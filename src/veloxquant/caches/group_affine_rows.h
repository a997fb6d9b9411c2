#pragma once
// Attention over per-token group-affine value rows (group_affine_codes.h: b-bit codes in the word
// layout, one f16 (scale, min) per channel group of each token) — KIVI's values and
// turboquant_rvq's quantized values — straight from the codes:
//   sum_j w_j v_jc = sum_j (w_j s_j,g(c)) code_jc + sum_j w_j m_j,g(c)
// so each row's weight is scaled per channel group and the codes accumulated as they are, in
// code order (attention/code_rows.h, built with the channel-group size so its runs() are set);
// the result is put back in natural order once per tile.
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

// A tile's value rows: n rows of codes `code_stride` words apart and their params rows
// `param_stride` f16 apart (2 * groups each: scale_g, min_g), read in `order` (channel groups of
// `group`). levels: nullptr, or the 2^bits levels a code stands for (caches/fitted_levels.h; the
// codes are read through it).
struct GroupAffineValueRows {
  const uint32_t* codes = nullptr;
  int64_t code_stride = 0;
  const uint16_t* params = nullptr;
  int64_t param_stride = 0;
  const attention::CodeOrder* order = nullptr;
  int64_t group = 0;
  int64_t n = 0;
  const float* levels = nullptr;
};

// Rows [j0, j1) of (b, h) of a store with value_codes [B, H, cap, words] u32 and value_params
// [B, H, cap, 2 * groups] f16.
GroupAffineValueRows group_affine_value_rows(const lm::Tensor& value_codes, const lm::Tensor& value_params,
                                             const attention::CodeOrder& value_order, int64_t group, int64_t b,
                                             int64_t h, int64_t j0, int64_t j1, const float* levels = nullptr);

using attention::TileWeights;

// acc[r * D + c] += sum over the rows j of w.weights[r * w.ld + j] * v_jc.
void accumulate_group_affine_rows(const GroupAffineValueRows& rows, const TileWeights& w, float* acc,
                                  attention::TileScratch& scratch);

}  // namespace veloxquant
