#include "veloxquant/caches/age_tier_rows.h"

#include "veloxquant/eviction/codec_tiles.h"

namespace veloxquant {

void AgeTierRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                             float* scores, int64_t ld, attention::TileScratch& scratch) const {
  eviction::score_coded_tile({tier_.key_codec(), tier_.key_rows(b, h), tier_.key_row_bytes(), tier_.key_dim()}, j0, j1,
                             prepared, n_queries, scores, ld, scratch);
}

void AgeTierRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                  int64_t ld, float* acc, attention::TileScratch& scratch) const {
  eviction::accumulate_coded_tile(
      {tier_.value_codec(), tier_.value_rows(b, h), tier_.value_row_bytes(), tier_.value_dim()}, j0, j1, weights,
      n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
