#pragma once
// A turboquant_block cache with a key split (key_split, caches/turboquant_block_split_keys.h;
// one-byte log scales, scale_format=log8) as a RowSource for the shared attention driver.
//
// Keys live in each head's own basis T_h (a permutation, then one rotation per group), so the
// query is prepared once per call for every kv head (prepared_dim = B * H * D: the driver does
// not say which head a query row belongs to) and score_tile reads head h's copy. Decode tiles
// (up to 4 queries) score the codes directly (attention/split_level_key_scores.h), the key mean
// as one bias <T q, T mu> per query and segment; prefill tiles decode the rows once for all
// queries (attention/split_level_rows.h: keys a segment at a time with its mean as the offset,
// log8 value blocks as one group per block). Values are turboquant_block's rotated blocks with
// log8 scales: in decode tiles their codes are added straight into the outputs
// (attention/block_level_value_sums.h) with the tile's scales turned to f16 first (each log8
// scale is an exact f16 value); Pi_v^T once per output row.
#include <cstdint>

#include "veloxquant/attention/row_source.h"
#include "veloxquant/attention/split_level_key_scores.h"

namespace veloxquant {

class TurboQuantBlockCache;

class TurboQuantBlockSplitRows final : public attention::RowSource {
 public:
  TurboQuantBlockSplitRows(const TurboQuantBlockCache& cache, int64_t rows);

  int64_t key_dim() const override;
  int64_t value_dim() const override;
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  int64_t prepared_dim() const override;
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;
  void finish_row(float* row) const override;

  // Rows [j0, j1) of (b, h) in the coded bases (keys: T_h, values: Pi_v), means added and sink
  // rows transformed from their f16 copies: f32 [j1 - j0, D] / [.., Dv]. What the tiles read.
  void transformed_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out) const;
  void transformed_values(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out) const;

 private:
  int64_t coded_start(int64_t n_queries, int64_t j0, int64_t j1) const;

  const TurboQuantBlockCache& cache_;
  int64_t rows_;
  bool coded_values_;
  attention::kernels::SplitLevelKeys keys_layout_;  // codes, scales and n_rows unset
  // The log8 value blocks in the same layout (one group per block), when tile_values_: prefill
  // tiles decode them with the split-level row decoder.
  attention::kernels::SplitLevelKeys values_layout_;
  bool tile_values_ = false;
};

}  // namespace veloxquant
