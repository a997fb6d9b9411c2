#pragma once
// nsnquant's storage (caches/nsnquant_cache.h) as one RowSource for the shared attention driver:
// rows [0, frontier) from their codes, the full-precision residual rows [frontier, rows) from the
// input dtype, one sequence.
//
// Keys: with q' the query rotated like the keys (quant/nsn_transform.h),
//   <q, k^_j> = a_j <q', z^_j> + b_j <q', mu_c>
// A tile's z^_j are decoded once (attention/codeword_sum_rows.h: per sub-vector one vector load
// and add per stage) and scored against all the tile's queries by the shared f32 tile kernel;
// <q', mu_c> is one dot product per chunk c. (The first version built a lookup table per query,
// sub-vectors x stages x entries floats, and paid one scalar lookup per code byte and query.)
//
// Values: the tile's rows are decoded in the rotated basis (a_j z^_j + b_j mu_c) into scratch and
// accumulated per query there, into an accumulator that stays in the rotated basis for the whole
// call; the residual rows' per-query sum is rotated into it (linear), and finish_row rotates each
// finished output row back once (one inverse Hadamard per query per call, not per tile).
//
// Prepared query layout: [raw q (dk) | rotated q' (dk)].
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/quant/nsn_transform.h"

namespace veloxquant {

class NsnQuantRows final : public attention::RowSource {
 public:
  NsnQuantRows(const quant::NsnTransform& key_transform, const quant::NsnTransform& value_transform,
               const lm::Tensor& key_codes, const lm::Tensor& value_codes, const lm::Tensor& key_scales,
               const lm::Tensor& value_scales, const lm::Tensor& key_means, const lm::Tensor& value_means,
               const lm::Tensor& tail_keys, const lm::Tensor& tail_values, int64_t frontier, int64_t rows,
               int64_t chunk);

  int64_t key_dim() const override { return dk_; }
  int64_t value_dim() const override { return dv_; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  int64_t prepared_dim() const override { return 2 * dk_; }
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;
  // The accumulator is in the values' rotated basis: back to the model's, once per output row.
  void finish_row(float* row) const override;

 private:
  const quant::NsnTransform& kt_;
  const quant::NsnTransform& vt_;
  const lm::Tensor& key_codes_;
  const lm::Tensor& value_codes_;
  const lm::Tensor& key_scales_;
  const lm::Tensor& value_scales_;
  const lm::Tensor& key_means_;
  const lm::Tensor& value_means_;
  attention::PlainRows tail_keys_, tail_values_;
  int64_t frontier_, rows_, chunk_, dk_, dv_;
};

}  // namespace veloxquant
