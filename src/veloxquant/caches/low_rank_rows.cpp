#include "veloxquant/caches/low_rank_rows.h"

#include <algorithm>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/f16_dots.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

void LowRankRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                             float* scores, int64_t ld, attention::TileScratch& scratch) const {
  dense_.score_tile(b, h, j0, j1, prepared, n_queries, scores, ld, scratch);
  const int64_t g = f_.group, d = key_dim(), pd = prepared_dim();
  // The dense source is done with the driver's scratch: the queries' projections on the block's
  // right vectors go there. The f16 factors are read as they are stored (attention/f16_dots.h for
  // the rank x queries products, the left vectors accumulated from f16): a handful of short
  // products per block, which the generic multi-row tile kernel spent several times as many
  // instructions on.
  const int64_t most = std::min(g, d);
  float* projection = scratch.f32(static_cast<std::size_t>(n_queries * most));
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / g, end = std::min(j1, (block + 1) * g);
    const int32_t* terms = row_ptr<int32_t>(*f_.block_terms, 0, 0, block);
    const int64_t first = terms[0], rank = std::min<int64_t>(terms[1], most);
    if (rank > 0) {
      attention::kernels::f16_dots(row_ptr<uint16_t>(*f_.key_right, b, h, first), d, rank, prepared, pd, n_queries, d,
                                   projection);
      lm::kernels::tiles::accumulate_rows_f16(projection, rank, n_queries,
                                              row_ptr<uint16_t>(*f_.key_left, b, h, first) + (a - block * g), g, rank,
                                              end - a, scores + (a - j0), ld);
    }
    a = end;
  }
}

void LowRankRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                  int64_t ld, float* acc, attention::TileScratch& scratch) const {
  dense_.accumulate_tile(b, h, j0, j1, weights, n_queries, ld, acc, scratch);
  const int64_t g = f_.group, dv = value_dim();
  const int64_t most = std::min(g, dv);
  float* coefficient = scratch.f32(static_cast<std::size_t>(n_queries * most));
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / g, end = std::min(j1, (block + 1) * g);
    const int32_t* terms = row_ptr<int32_t>(*f_.block_terms, 0, 0, block);
    const int64_t first = terms[2], rank = std::min<int64_t>(terms[3], most);
    if (rank > 0) {
      // coefficient[r][i] = sum over the tile's rows of the block of w[r][t] left_i[t].
      attention::kernels::f16_dots(row_ptr<uint16_t>(*f_.value_left, b, h, first) + (a - block * g), g, rank,
                                   weights + (a - j0), ld, n_queries, end - a, coefficient);
      lm::kernels::tiles::accumulate_rows_f16(coefficient, rank, n_queries,
                                              row_ptr<uint16_t>(*f_.value_right, b, h, first), dv, rank, dv, acc, dv);
    }
    a = end;
  }
}

}  // namespace veloxquant
