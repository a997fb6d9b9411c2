#include "veloxquant/caches/low_rank_rows.h"

#include <algorithm>
#include <vector>

#include "veloxquant/attention/f16_dots.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

void LowRankRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                             float* scores, int64_t ld, attention::TileScratch& scratch) const {
  dense_.score_tile(b, h, j0, j1, prepared, n_queries, scores, ld, scratch);
  const int64_t g = f_.group, d = key_dim(), pd = prepared_dim();
  // The dense source is done with the driver's scratch: the queries' projections on a block's
  // right vectors go there. The f16 factors are read as they are stored, the whole tile in one
  // attention/f16_dots.h call (per block: the rank x queries projections, then rank multiply-adds
  // per row and query); the head's factor rows are located once per tile.
  const int64_t most = std::min(g, d);
  float* projection = scratch.f32(static_cast<std::size_t>(n_queries * most));
  if (f_.key_right->numel() == 0 || f_.block_terms->numel() == 0) return;  // no key terms stored yet
  const attention::kernels::LowRankTerms keys{row_ptr<int32_t>(*f_.block_terms, 0, 0, 0),
                                              f_.block_terms->strides()[2],
                                              0,
                                              row_ptr<uint16_t>(*f_.key_left, b, h, 0),
                                              f_.key_left->strides()[2],
                                              row_ptr<uint16_t>(*f_.key_right, b, h, 0),
                                              f_.key_right->strides()[2],
                                              g};
  attention::kernels::low_rank_scores(keys, j0, j1, prepared, pd, d, n_queries, scores, ld, projection);
}

void LowRankRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                  int64_t ld, float* acc, attention::TileScratch& scratch) const {
  dense_.accumulate_tile(b, h, j0, j1, weights, n_queries, ld, acc, scratch);
  const int64_t g = f_.group, dv = value_dim();
  const int64_t most = std::min(g, dv);
  float* coefficient = scratch.f32(static_cast<std::size_t>(n_queries * most));
  if (f_.value_left->numel() == 0 || f_.block_terms->numel() == 0) return;  // no value terms stored yet
  // coefficient[r][i] = sum over the tile's rows of a block of w[r][t] left_i[t], then
  // acc[r] += sum_i coefficient[r][i] right_i.
  const attention::kernels::LowRankTerms values{row_ptr<int32_t>(*f_.block_terms, 0, 0, 0),
                                                f_.block_terms->strides()[2],
                                                2,
                                                row_ptr<uint16_t>(*f_.value_left, b, h, 0),
                                                f_.value_left->strides()[2],
                                                row_ptr<uint16_t>(*f_.value_right, b, h, 0),
                                                f_.value_right->strides()[2],
                                                g};
  attention::kernels::low_rank_values(values, j0, j1, weights, ld, n_queries, dv, acc, coefficient);
}

}  // namespace veloxquant
