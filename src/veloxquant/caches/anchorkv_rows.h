#pragma once
// What one anchorkv attention call reads (caches/anchorkv_cache.h), as the single RowSource of the
// shared attention driver: per (b, h) the compressed rows 0 .. rows - 1, then the exact window and
// the call's own rows (caches/window_call_rows.h), at contiguous positions from 0.
//
// A compressed key is c * a (+ a residual r), so <q, k> = c <q, a> (+ <q, r>): with few anchors
// the query's dot products with all of them are computed once per head and call (kept per
// thread) and each row costs one gather and multiply (plus, for the rows that have one, its
// residual scored from its codes: caches/anchorkv_residuals.h). Values: sum_j w_j c_j v_a(j) =
// sum_a (sum_{j: a(j) = a} w_j c_j) v_a — the weights are gathered per anchor and the anchors'
// f16 values added once per tile.
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/window_call_rows.h"

namespace veloxquant {

class AnchorKvCache;

class AnchorKvRows final : public attention::RowSource {
 public:
  // Anchors at most this many use the per-tile anchor tables; more are read per row.
  static constexpr int64_t kMaxTableAnchors = 64;

  AnchorKvRows(const AnchorKvCache& cache, const lm::Tensor& call_k, const lm::Tensor& call_v);

  int64_t key_dim() const override { return exact_.key_dim(); }
  int64_t value_dim() const override { return exact_.value_dim(); }
  int64_t rows(int64_t, int64_t) const override;
  // [query | query in the residual codes' order | its sum] when the residual width reads by planes.
  int64_t prepared_dim() const override;
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  // The block's queries x every anchor key of (b, h), [n_queries, anchors]; `widened` holds the
  // anchors' keys in f32 when they are computed.
  const float* anchor_scores(int64_t b, int64_t h, const float* prepared, int64_t n_queries, float* widened) const;

  const AnchorKvCache& c_;
  WindowCallRows exact_;
  attention::PlainRows anchor_k_, anchor_v_;
  uint64_t call_;  // distinct per object, so a thread's kept anchor scores are never another call's
};

}  // namespace veloxquant
