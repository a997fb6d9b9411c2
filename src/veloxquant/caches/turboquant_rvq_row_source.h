#pragma once
// turboquant_rvq's rows as a RowSource for the attention driver: keys scored in the rotated
// basis from their two code streams, values from the plain rows or from group-affine codes.
//
// A key is x_hat = norm * Pi^T (c1[i1] + c2[i2]), so <q, x_hat> = norm * <Pi q, c1[i1] + c2[i2]>:
// the query is rotated once per call (prepare_query), each tile's codes become centroid sums in
// registers (tile_kernels.h centroid_planes: table lookups, no rotation, no f32 key copy kept),
// every query of the block scores them, and each row's bf16 norm scales its score.
// Planar 2-bit keys skip the f32 tile: the query is rounded to 16 bits once per call and each
// row is scored as integers from 16-bit level lookups (attention/codebook_key_scores.h).
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/codebook_key_scores.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant {

// The cache's values, `dim` wide: either plain ([B,H,cap,Dv] f16/bf16/f32, order == nullptr) or
// group-affine codes/params with their code order (group `group`).
struct RvqValueRows {
  const lm::Tensor& plain;
  const lm::Tensor& codes;
  const lm::Tensor& params;
  const attention::CodeOrder* order;
  int64_t group, dim;
};

class TurboQuantRvqRows final : public attention::RowSource {
 public:
  // packed1/packed2 U8 [B,H,cap,stream_bytes], norms BF16 [B,H,cap,1]; values as RvqValueRows
  // says. The first `rows` rows of each head are read.
  TurboQuantRvqRows(const quant::TurboQuantRvq& quantizer, const attention::CodeOrder& key_order,
                    const lm::Tensor& packed1, const lm::Tensor& packed2, const lm::Tensor& norms,
                    const RvqValueRows& values, int64_t rows);

  int64_t key_dim() const override { return quantizer_.dim(); }
  int64_t value_dim() const override { return value_dim_; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  // Integer keys: the query's 16-bit values (their bytes, in lookup order) and its step.
  int64_t prepared_dim() const override { return integer_keys_ ? key_dim() / 2 + 1 : key_dim(); }
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;
  // Both code streams, the norms and the values (plain rows, or codes and group params).
  void prefetch_tile(int64_t b, int64_t h, int64_t j0, int64_t j1) const override;

 private:
  const quant::TurboQuantRvq& quantizer_;
  const attention::CodeOrder& key_order_;
  const lm::Tensor& packed1_;
  const lm::Tensor& packed2_;
  const lm::Tensor& norms_;
  attention::PlainRows plain_values_;
  const lm::Tensor& value_codes_;
  const lm::Tensor& value_params_;
  const attention::CodeOrder* value_order_;
  int64_t value_group_, value_dim_, rows_;
  bool integer_keys_;
  int32_t integer_limit_;
  attention::kernels::CodebookLevels16 levels16_{};
};

}  // namespace veloxquant
