#include "veloxquant/eviction/eviction_row_source.h"

#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/tile_kernels.h"

namespace veloxquant::eviction {

namespace {

// Rows [j0, j1) decoded to f32 [j1 - j0, dim]: a plain widening when the codec keeps the
// dtype, else the codec's own decode row by row.
void decode_tile(const RowCodec& codec, lm::DType dtype, const std::byte* first_row, int64_t row_bytes, int64_t j0,
                 int64_t j1, int64_t dim, float* out) {
  if (codec.exact()) {
    attention::widen_rows(first_row, dtype, row_bytes, j0, j1, dim, out);
    return;
  }
  for (int64_t j = j0; j < j1; ++j, out += dim) codec.decode(first_row + j * row_bytes, out);
}

}  // namespace

void EvictionRowSource::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                   int64_t n_queries, float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = key_dim(), n = j1 - j0;
  float* tile = scratch.f32(static_cast<std::size_t>(n * d));
  decode_tile(rows_.key_codec(), rows_.dtype(), rows_.key_rows(b, h), rows_.key_row_bytes(), j0, j1, d, tile);
  attention::kernels::score_rows(prepared, d, n_queries, tile, d, n, d, scores, ld);
}

void EvictionRowSource::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                        int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t d = value_dim(), n = j1 - j0;
  float* tile = scratch.f32(static_cast<std::size_t>(n * d));
  decode_tile(rows_.value_codec(), rows_.dtype(), rows_.value_rows(b, h), rows_.value_row_bytes(), j0, j1, d, tile);
  attention::kernels::accumulate_rows(weights, ld, n_queries, tile, d, n, d, acc, d);
}

}  // namespace veloxquant::eviction
