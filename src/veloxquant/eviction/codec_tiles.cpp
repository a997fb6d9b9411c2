#include "veloxquant/eviction/codec_tiles.h"

#include "veloxquant/attention/tile_kernels.h"

namespace veloxquant::eviction {

void score_coded_tile(const CodedHeadRows& rows, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                      float* scores, int64_t ld, attention::TileScratch& scratch) {
  const int64_t n = j1 - j0, dim = rows.dim;
  float* tile = scratch.f32(static_cast<std::size_t>(n * dim));
  rows.codec.decode_rows(rows.head_rows + j0 * rows.row_bytes, rows.row_bytes, n, static_cast<int>(dim), tile);
  attention::kernels::score_rows(prepared, dim, n_queries, tile, dim, n, dim, scores, ld);
}

void accumulate_coded_tile(const CodedHeadRows& rows, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                           int64_t ld, float* acc, attention::TileScratch& scratch) {
  const int64_t n = j1 - j0, dim = rows.dim;
  float* tile = scratch.f32(static_cast<std::size_t>(n * dim));
  rows.codec.decode_rows(rows.head_rows + j0 * rows.row_bytes, rows.row_bytes, n, static_cast<int>(dim), tile);
  attention::kernels::accumulate_rows(weights, ld, n_queries, tile, dim, n, dim, acc, dim);
}

}  // namespace veloxquant::eviction
