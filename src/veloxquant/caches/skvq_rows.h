#pragma once
// skvq's quantized rows (caches/skvq_cache.h) as one RowSource of the shared attention driver;
// the sinks and the full-precision window are plain segments of their own (attention/dtype_rows.h).
//
// Rows are stored with their channels in the head's frozen range order, so a tile is decoded to
// f32 in that order by the SIMD group-affine decoder (attention/affine_word_rows.h) and then:
//   keys:   the tile's queries are gathered into the same order (n_queries x Dk per tile, 1/64 of
//           the tile's scoring work) and scored against it (score_rows);
//   values: accumulated in stored order into a zeroed block (accumulate_rows), then scattered
//           back to natural order into the driver's accumulator (n_queries x Dv per tile).
// Permuting per tile rather than in prepare_query / finish_row: those hooks get no head index,
// and the order is per (batch, kv head).
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/skvq_codes.h"

namespace veloxquant {

class SkvqRows final : public attention::RowSource {
 public:
  // key_codes / value_codes: [B, H, cap, layout.width()] u32; row j holds position
  // position_base + j. key_order / value_order: [B, H, 1, D] i32, or nullptr (natural order).
  SkvqRows(const lm::Tensor& key_codes, const lm::Tensor& value_codes, const lm::Tensor* key_order,
           const lm::Tensor* value_order, const skvq::CodeLayout& key_layout, const skvq::CodeLayout& value_layout,
           int64_t rows, int64_t position_base);

  int64_t key_dim() const override { return key_layout_.dim; }
  int64_t value_dim() const override { return value_layout_.dim; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  int64_t position_base() const override { return position_base_; }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  // Rows [j0, j1) of (b, h) of `codes` decoded to f32 [j1 - j0, layout.dim], in stored order.
  static void decode_tile(const lm::Tensor& codes, const skvq::CodeLayout& layout, int64_t b, int64_t h, int64_t j0,
                          int64_t j1, float* out);

  const lm::Tensor& key_codes_;
  const lm::Tensor& value_codes_;
  const lm::Tensor* key_order_;
  const lm::Tensor* value_order_;
  skvq::CodeLayout key_layout_, value_layout_;
  int64_t rows_, position_base_;
};

}  // namespace veloxquant
