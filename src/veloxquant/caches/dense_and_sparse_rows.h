#pragma once
// A KIVI-layout cache's quantized rows plus their sparse corrections, as one RowSource for the
// attention driver: the dense source (KiviQuantizedRows, scored and accumulated from the codes)
// does the work, and this wrapper adds what the codes do not hold —
//   * outliers (sparse_outliers.h): score += q_c * delta, acc_c += w * delta, for the few
//     isolated elements of the tile's rows;
//   * sinks (sink_rows.h): the score of a sink row is replaced by q . k_exact, and its weight is
//     taken out of the dense accumulation and given to the exact value row instead.
// Both touch O(outliers + sinks) per tile, never the dense rows. The prepared query is the dense
// source's (its code order), so outlier channels are looked up through `key_position` (natural
// channel -> code-order position) and a sink key is permuted into code order before its dot product.
#include <cstdint>
#include <vector>

#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/sink_rows.h"
#include "veloxquant/caches/sparse_outliers.h"

namespace veloxquant {

class DenseAndSparseRows final : public attention::RowSource {
 public:
  DenseAndSparseRows(const attention::RowSource& dense, const std::vector<int32_t>& key_position, const SinkRows& sinks,
                     const SparseOutliers& outliers);

  int64_t key_dim() const override { return key_dim_; }
  int64_t value_dim() const override { return value_dim_; }
  int64_t rows(int64_t b, int64_t h) const override { return dense_.rows(b, h); }
  // The dense source's positions (gear's block sets interleave; the others' are contiguous: nullptr).
  const int32_t* positions(int64_t b, int64_t h) const override { return dense_.positions(b, h); }
  int64_t position_base() const override { return dense_.position_base(); }
  int64_t prepared_dim() const override { return prepared_dim_; }
  void prepare_query(const float* query, float* prepared) const override { dense_.prepare_query(query, prepared); }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;
  void finish_row(float* row) const override { dense_.finish_row(row); }

 private:
  const attention::RowSource& dense_;
  const std::vector<int32_t>& key_position_;
  const SinkRows& sinks_;
  const SparseOutliers& outliers_;
  // The dense source's sizes, read once: per tile they were chains of guarded virtual calls.
  int64_t key_dim_, value_dim_, prepared_dim_;
};

}  // namespace veloxquant
