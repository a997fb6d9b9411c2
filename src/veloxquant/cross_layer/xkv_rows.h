#pragma once
// xkv's quantized key blocks as a RowSource for the shared attention driver.
//
// A stored key is k = mean + sum_i z_i V_i (V_i the group's shared directions). Its score is
// <q, k> = <q, mean> + <V q, z>: per tile the query is projected once on the 1 + coded table rows
// (mean and directions in one score_rows call), the tile's latent rows are decoded (codes x the
// block's per-channel (scale, min)) and scored in `coded` dimensions, and <q, mean> is added.
// Values are the exact rows, read as the native cache's.
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/svdq_layout.h"

namespace veloxquant {

// The latent row layout: `coded` channels at `bits` each, in groups of 8 (the decoder's vector
// width), codes packed densely group by group.
SvdqLayout xkv_latent_layout(int64_t dim, int64_t coded, int bits);

class XkvRows final : public attention::RowSource {
 public:
  // table: the basis table [B, H, 1 + coded, D] (row 0 the mean).
  XkvRows(const lm::Tensor& codes, const lm::Tensor& params, const lm::Tensor& table, const lm::Tensor& values,
          const SvdqLayout& layout, int64_t rows, int group);

  int64_t key_dim() const override { return layout_.dim; }
  int64_t value_dim() const override { return values_.dim; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries, int64_t ld,
                       float* acc, attention::TileScratch& scratch) const override;

 private:
  const lm::Tensor& codes_;
  const lm::Tensor& params_;
  const lm::Tensor& table_;
  attention::PlainRows values_;
  const SvdqLayout& layout_;
  int64_t rows_;
  int group_;
};

}  // namespace veloxquant
