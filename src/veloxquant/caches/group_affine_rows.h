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

// acc[r * D + c] += sum over rows j in [j0, j1) of (b, h) of weights[r * ld + j - j0] * v_jc, with
// value_codes [B, H, cap, words] u32 and value_params [B, H, cap, 2 * groups] f16. levels: nullptr,
// or the 2^bits levels a code stands for (caches/fitted_levels.h; the codes are read through it).
void accumulate_group_affine_values(const lm::Tensor& value_codes, const lm::Tensor& value_params,
                                    const attention::CodeOrder& value_order, int64_t group, int64_t b, int64_t h,
                                    int64_t j0, int64_t j1, const float* weights, int64_t n_queries, int64_t ld,
                                    float* acc, attention::TileScratch& scratch, const float* levels = nullptr);

// The same over raw rows: n rows of codes `code_stride` words apart and their params rows
// `param_stride` f16 apart (a store whose code and param tensors index heads differently).
void accumulate_group_affine_rows(const uint32_t* codes, int64_t code_stride, const uint16_t* params,
                                  int64_t param_stride, const attention::CodeOrder& value_order, int64_t group,
                                  int64_t n, const float* weights, int64_t n_queries, int64_t ld, float* acc,
                                  attention::TileScratch& scratch, const float* levels = nullptr);

}  // namespace veloxquant
