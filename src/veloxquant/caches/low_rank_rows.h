#pragma once
// Per-block low-rank corrections on top of another RowSource's rows, for the attention driver:
// GEAR's L = sum_i left_i right_i^T term (caches/gear_cache.h) read straight from its factors.
//
// Rows are in blocks of G; block g carries rank_k key terms and rank_v value terms (f16 factors,
// one stored row per term: left over the block's G rows, right over the channels). For a query q
// and row t of the block:
//   score += sum_i left_i[t] (right_i . q)
// so the query is projected on the block's rank_k right vectors once (rank_k dot products) and
// each row pays rank_k multiply-adds. For values with weights w:
//   acc_c += sum_i (sum_t w_t left_i[t]) right_i[c]
// — rank_v weighted sums over the block's rows, then rank_v rows accumulated. Neither touches a
// dense G x D correction. The key right vectors are stored in the code order of the dense
// source's prepared query (its first key_dim floats), the value right vectors in natural order
// (the order the dense source leaves its accumulator in).
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

// Views of a cache's factor storage.
struct LowRankFactors {
  const lm::Tensor* block_terms =
      nullptr;  // i32 [1, 1, blocks, 4]: first key term, key rank, first value term, value rank
  const lm::Tensor* key_left = nullptr;     // f16 [B, H, key terms, G]
  const lm::Tensor* key_right = nullptr;    // f16 [B, H, key terms, Dk], code order
  const lm::Tensor* value_left = nullptr;   // f16 [B, H, value terms, G]
  const lm::Tensor* value_right = nullptr;  // f16 [B, H, value terms, Dv], natural order
  int64_t group = 0;
};

class LowRankRows final : public attention::RowSource {
 public:
  LowRankRows(const attention::RowSource& dense, const LowRankFactors& factors) : dense_(dense), f_(factors) {}

  int64_t key_dim() const override { return dense_.key_dim(); }
  int64_t value_dim() const override { return dense_.value_dim(); }
  int64_t rows(int64_t b, int64_t h) const override { return dense_.rows(b, h); }
  const int32_t* positions(int64_t b, int64_t h) const override { return dense_.positions(b, h); }
  int64_t position_base() const override { return dense_.position_base(); }
  int64_t prepared_dim() const override { return dense_.prepared_dim(); }
  void prepare_query(const float* query, float* prepared) const override { dense_.prepare_query(query, prepared); }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;
  void finish_row(float* row) const override { dense_.finish_row(row); }

 private:
  const attention::RowSource& dense_;
  LowRankFactors f_;
};

}  // namespace veloxquant
