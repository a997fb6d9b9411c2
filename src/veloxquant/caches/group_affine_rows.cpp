#include "veloxquant/caches/group_affine_rows.h"

#include <algorithm>

#include "veloxquant/attention/level_lookup.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/core/group_quant.h"

namespace veloxquant {

using cache_rows::row_ptr;

void accumulate_group_affine_values(const lm::Tensor& value_codes, const lm::Tensor& value_params,
                                    const attention::CodeOrder& value_order, int64_t group, int64_t b, int64_t h,
                                    int64_t j0, int64_t j1, const float* weights, int64_t n_queries, int64_t ld,
                                    float* acc, attention::TileScratch& scratch, const float* levels) {
  accumulate_group_affine_rows(row_ptr<uint32_t>(value_codes, b, h, j0), value_codes.strides()[2],
                               row_ptr<uint16_t>(value_params, b, h, j0), value_params.strides()[2], value_order, group,
                               j1 - j0, weights, n_queries, ld, acc, scratch, levels);
}

void accumulate_group_affine_rows(const uint32_t* codes_rows, int64_t code_stride, const uint16_t* param_rows,
                                  int64_t param_stride, const attention::CodeOrder& value_order, int64_t group,
                                  int64_t n, const float* weights, int64_t n_queries, int64_t ld, float* acc,
                                  attention::TileScratch& scratch, const float* levels) {
  const int64_t d = value_order.size();
  const int64_t groups = (d + group - 1) / group;
  // Scratch: codes [n, d], accumulator in code order [n_queries, d], group-scaled weights
  // [groups][n_queries, n], per-group biases [groups][n_queries].
  float* codes = scratch.f32(static_cast<std::size_t>(n * d + n_queries * d + groups * n_queries * (n + 1)));
  float* acc_code = codes + n * d;
  float* scaled = acc_code + n_queries * d;
  float* bias = scaled + groups * n_queries * n;
  std::fill(acc_code, acc_code + n_queries * d, 0.0f);
  // The tile's (scale, min) pairs (rows of params are back to back) widened into one column per
  // field, then per channel group g: weights scaled by each row's s_jg, biases sum_j w_j m_jg.
  float* columns = scratch.f32_second(static_cast<std::size_t>(n * param_stride));
  attention::kernels::f16_columns(param_rows, n, param_stride, columns);
  for (int64_t g = 0; g < groups; ++g) {
    float* sg = scaled + g * n_queries * n;
    float* bg = bias + g * n_queries;
    const float* scale = columns + 2 * g * n;
    for (int64_t r = 0; r < n_queries; ++r) {
      bg[r] = attention::kernels::scale_column(weights + r * ld, n, scale, scale + n, sg + r * n);
    }
  }
  // Planar rows whose 8-byte chunks each lie in one channel group are accumulated straight from
  // their bytes; otherwise each run of code-order positions (one group) from the unpacked tile.
  const int64_t plane_bytes = d * value_order.bits() / 8;
  const bool from_bytes = levels == nullptr && value_order.planar() &&
                          attention::kernels::can_accumulate_planes(value_order.bits(), plane_bytes, group);
  if (from_bytes) {
    attention::kernels::accumulate_planes(reinterpret_cast<const uint8_t*>(codes_rows), code_stride * 4, n, plane_bytes,
                                          value_order.bits(), group, scaled, n_queries, acc_code, d);
  } else {
    if (value_order.planar()) {
      value_order.unpack_rows(codes_rows, code_stride, n, codes);
      if (levels != nullptr) attention::kernels::lookup_levels(codes, n * d, levels, 1 << value_order.bits());
    } else {  // 3, 5, 6, 7 bits: word gathers, straight into levels when there are any
      attention::kernels::unpack_word_rows(codes_rows, code_stride, n, d, value_order.bits(), levels, codes);
    }
    for (const attention::CodeOrder::Run& run : value_order.runs()) {
      attention::kernels::accumulate_rows(scaled + run.group * n_queries * n, n, n_queries, codes + run.start, d, n,
                                          run.length, acc_code + run.start, d);
    }
  }
  // Back to natural order, where a channel group is a contiguous run: each gets its bias there.
  for (int64_t r = 0; r < n_queries; ++r) {
    float* out = acc + r * d;
    value_order.add_to_natural(acc_code + r * d, out);
    for (int64_t g = 0; g < groups; ++g) {
      const float bg = bias[g * n_queries + r];
      for (int64_t c = g * group, end = std::min(d, c + group); c < end; ++c) out[c] += bg;
    }
  }
}

}  // namespace veloxquant
