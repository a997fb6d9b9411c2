#pragma once
// Where a tile of group-affine value rows is accumulated: n_q queries' row weights already scaled
// by each row's group scale (group_weights / scale_column: ws[(g * n_q + r) * n_rows + j] for
// channel group g, query r, row j), the groups' constant terms bias[g * n_q + r] = sum_j w_j m_jg
// (or null: none), and the queries' accumulators acc[r * acc_stride + i]. Shared by the kernels
// that read the codes as words (affine_value_sums.h) or by planes (tile_kernels.h).
#include <cstdint>

namespace veloxquant::attention::kernels {

struct GroupValueTargets {
  const float* ws;
  const float* bias;
  int64_t n_q;
  float* acc;
  int64_t acc_stride;
};

}  // namespace veloxquant::attention::kernels
