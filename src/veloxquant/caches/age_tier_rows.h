#pragma once
// One age_tiered tier (caches/age_tier.h) as a segment of the shared attention driver: its live
// rows hold the contiguous positions [first_position, first_position + rows), keys and values
// decoded per 64-row tile into the driver's scratch (eviction/codec_tiles.h) and read there by
// every query head of the GQA group.
#include <cstdint>

#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/age_tier.h"

namespace veloxquant {

class AgeTierRows final : public attention::RowSource {
 public:
  explicit AgeTierRows(const AgeTier& tier) : tier_(tier) {}

  int64_t key_dim() const override { return tier_.key_dim(); }
  int64_t value_dim() const override { return tier_.value_dim(); }
  int64_t rows(int64_t, int64_t) const override { return tier_.rows(); }
  int64_t position_base() const override { return tier_.first_position(); }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  const AgeTier& tier_;
};

}  // namespace veloxquant
