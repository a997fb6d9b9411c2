#include "veloxquant/caches/group_affine_rows.h"

#include <algorithm>

#include "veloxquant/attention/affine_value_sums.h"
#include "veloxquant/attention/level_lookup.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/core/group_quant.h"

namespace veloxquant {

using cache_rows::row_ptr;

GroupAffineValueRows group_affine_value_rows(const lm::Tensor& value_codes, const lm::Tensor& value_params,
                                             const attention::CodeOrder& value_order, int64_t group, int64_t b,
                                             int64_t h, int64_t j0, int64_t j1, const float* levels) {
  return {row_ptr<uint32_t>(value_codes, b, h, j0),
          value_codes.strides()[2],
          row_ptr<uint16_t>(value_params, b, h, j0),
          value_params.strides()[2],
          &value_order,
          group,
          j1 - j0,
          levels};
}

void accumulate_group_affine_rows(const GroupAffineValueRows& rows, const TileWeights& w, float* acc,
                                  attention::TileScratch& scratch) {
  const attention::CodeOrder& value_order = *rows.order;
  const uint32_t* codes_rows = rows.codes;
  const uint16_t* param_rows = rows.params;
  const int64_t code_stride = rows.code_stride, param_stride = rows.param_stride, group = rows.group, n = rows.n;
  const float* levels = rows.levels;
  const float* weights = w.weights;
  const int64_t n_queries = w.n_queries, ld = w.ld;
  const int64_t d = value_order.size();
  const int64_t groups = (d + group - 1) / group;
  const int bits = value_order.bits();
  const int64_t plane_bytes = d * bits / 8;
  // Planar rows whose 8-byte chunks each lie in one channel group are accumulated straight from
  // their bytes (in code order); other widths straight from their words (natural order, levels
  // looked up in registers); anything else from an unpacked f32 tile, run by run.
  const bool from_bytes =
      levels == nullptr && value_order.planar() && attention::kernels::can_accumulate_planes(bits, plane_bytes, group);
  const bool from_words =
      !value_order.planar() && attention::kernels::can_accumulate_word_values(bits, d, group, levels != nullptr);
  const int64_t tile_floats = from_bytes || from_words ? 0 : n * d;
  const int64_t code_acc_floats = from_words ? 0 : n_queries * d;
  // Scratch: codes [n, d] (tile path only), accumulator in code order [n_queries, d] (not for
  // natural-order words), group-scaled weights [groups][n_queries, n], per-group biases
  // [groups][n_queries].
  float* codes = scratch.f32(static_cast<std::size_t>(tile_floats + code_acc_floats + groups * n_queries * (n + 1)));
  float* acc_code = codes + tile_floats;
  float* scaled = acc_code + code_acc_floats;
  float* bias = scaled + groups * n_queries * n;
  // Per channel group g: the weights scaled by each row's s_jg, and the biases sum_j w_j m_jg, in
  // one pass over the tile's f16 (scale, min) pairs.
  float* columns = scratch.f32_second(static_cast<std::size_t>(2 * groups * n));
  attention::kernels::group_weights(param_rows, param_stride, n, groups, weights, ld, n_queries, columns, scaled, bias);
  if (from_words) {
    // Natural order: straight into the caller's accumulator, the biases with it.
    attention::kernels::accumulate_word_values({codes_rows, code_stride, n, d, bits, group, levels},
                                               {scaled, bias, n_queries, acc, d});
    return;
  }
  std::fill(acc_code, acc_code + n_queries * d, 0.0f);
  if (from_bytes) {
    // The biases enter with the accumulators (each plane chunk lies in one channel group).
    attention::kernels::accumulate_planes(
        {reinterpret_cast<const uint8_t*>(codes_rows), code_stride * 4, n, plane_bytes, bits, group},
        {scaled, bias, n_queries, acc_code, d});
    for (int64_t r = 0; r < n_queries; ++r) value_order.add_to_natural(acc_code + r * d, acc + r * d);
    return;
  } else {
    if (value_order.planar()) {
      value_order.unpack_rows(codes_rows, code_stride, n, codes);
      if (levels != nullptr) attention::kernels::lookup_levels(codes, n * d, levels, 1 << bits);
    } else {  // 3, 5, 6, 7 bits: word gathers, straight into levels when there are any
      attention::kernels::unpack_word_rows(codes_rows, code_stride, n, d, bits, levels, codes);
    }
    for (const attention::CodeOrder::Run& run : value_order.runs()) {
      attention::kernels::accumulate_rows(scaled + run.group * n_queries * n, n, n_queries, codes + run.start, d, n,
                                          run.length, acc_code + run.start, d);
    }
  }
  // Back to natural order, where a channel group is a contiguous run: each gets its bias there.
  for (int64_t r = 0; r < n_queries; ++r) value_order.add_to_natural(acc_code + r * d, acc + r * d);
  attention::kernels::add_group_biases(bias, n_queries, d, group, acc, d);
}

}  // namespace veloxquant
