#pragma once
// An eviction cache's kept rows as a RowSource for the attention driver: rows at their true
// (non-contiguous, ascending) positions, each stored by its codec (row_codec.h). Rows kept in
// the host's dtype are widened tile by tile like the native cache's; quantized rows are decoded
// per tile into scratch — either way read once per tile for every query head of the group.
#include <cstdint>

#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/eviction/eviction_rows.h"

namespace veloxquant::eviction {

class EvictionRowSource final : public attention::RowSource {
 public:
  // `rvq_order`: the code order of turboquant_rvq key rows (attention/code_rows.h) when the keys
  // are stored as turboquant_rvq codes with b in 1, 2, 4, 8 — they are then scored in the rotated
  // basis from their codes, as TurboQuantRvqRows does; nullptr: keys decoded by their codec.
  explicit EvictionRowSource(const EvictionRows& rows, const attention::CodeOrder* rvq_order = nullptr)
      : rows_(rows), rvq_order_(rvq_order) {}
  void prepare_query(const float* query, float* prepared) const override;

  int64_t key_dim() const override { return rows_.key_dim(); }
  int64_t value_dim() const override { return rows_.value_dim(); }
  int64_t rows(int64_t, int64_t) const override { return rows_.rows(); }
  const int32_t* positions(int64_t b, int64_t h) const override { return rows_.positions(b, h); }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  // score_tile over n rows lying back to back from first_row.
  void score_piece(const std::byte* first_row, int64_t n, const float* prepared, int64_t n_queries, float* scores,
                   int64_t ld, attention::TileScratch& scratch) const;

  const EvictionRows& rows_;
  const attention::CodeOrder* rvq_order_;
};

}  // namespace veloxquant::eviction
