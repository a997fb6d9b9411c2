#pragma once
// A RowSource restricted to some of its rows: for each (batch, kv head) a list of row ranges
// [begin, end) of the underlying source, ascending and disjoint, presented to the attention
// driver as one shorter sequence (view row 0 = the first selected row). For sparse attention
// that picks rows per step — rocketkv's page selection, or any method that attends to a
// query-dependent subset of a cache's rows: the driver sees only the selected rows, so
// everything it computes (output, row weights) is over them, while scoring and accumulation
// stay the underlying source's (coded rows are read in their own domain).
//
// Pages and windows are contiguous, so a selection is a handful of ranges and each tile of the
// view is a few calls on the underlying source with the same ld (a range's scores land at
// their offset inside the tile). Heads without ranges set attend all their rows.
#include <cstdint>
#include <utility>
#include <vector>

#include "veloxquant/attention/row_source.h"

namespace veloxquant::attention {

using RowRange = std::pair<int64_t, int64_t>;  // [begin, end) rows of the underlying source

class RowRangesSource final : public RowSource {
 public:
  RowRangesSource(const RowSource& base, int64_t batch, int64_t heads);
  // Over a new base, every head back to all its rows; the per-head buffers keep their capacity,
  // so a cache that selects rows every decode step reuses one view without allocating.
  void reset(const RowSource& base, int64_t batch, int64_t heads);

  // The rows (b, h) attends; throws base::InvalidArgument for ranges that are empty, out of
  // [0, base.rows(b, h)), or not ascending and disjoint.
  void set_ranges(int64_t b, int64_t h, const std::vector<RowRange>& ranges);
  const std::vector<RowRange>& ranges(int64_t b, int64_t h) const { return heads_[index(b, h)].ranges; }
  // The underlying row of view row j of (b, h).
  int64_t base_row(int64_t b, int64_t h, int64_t j) const;

  int64_t key_dim() const override { return base_->key_dim(); }
  int64_t value_dim() const override { return base_->value_dim(); }
  int64_t rows(int64_t b, int64_t h) const override { return heads_[index(b, h)].rows; }
  const int32_t* positions(int64_t b, int64_t h) const override { return heads_[index(b, h)].positions.data(); }
  int64_t prepared_dim() const override { return base_->prepared_dim(); }
  void prepare_query(const float* query, float* prepared) const override { base_->prepare_query(query, prepared); }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, TileScratch& scratch) const override;
  void finish_row(float* row) const override { base_->finish_row(row); }

 private:
  struct Head {
    std::vector<RowRange> ranges;  // one range [0, rows) until set_ranges
    std::vector<int64_t> starts;   // view row of each range's first row
    std::vector<int32_t> positions;
    int64_t rows = 0;
  };
  std::size_t index(int64_t b, int64_t h) const { return static_cast<std::size_t>(b * n_heads_ + h); }
  void build(int64_t b, int64_t h, const RowRange* ranges, std::size_t count);
  // Calls f(base_j0, base_j1, view offset) for the underlying pieces of view rows [j0, j1).
  template <class F>
  void for_pieces(int64_t b, int64_t h, int64_t j0, int64_t j1, F&& f) const;

  const RowSource* base_;
  int64_t n_heads_;
  std::vector<Head> heads_;
};

}  // namespace veloxquant::attention
