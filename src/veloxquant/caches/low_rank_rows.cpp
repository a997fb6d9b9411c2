#include "veloxquant/caches/low_rank_rows.h"

#include <algorithm>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

void LowRankRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                             float* scores, int64_t ld, attention::TileScratch& scratch) const {
  dense_.score_tile(b, h, j0, j1, prepared, n_queries, scores, ld, scratch);
  const int64_t g = f_.group, d = key_dim(), pd = prepared_dim();
  // Grow-only per-thread buffers (the driver's scratch belongs to the dense source): the
  // block's factors widened, and the queries' projections on the right vectors.
  thread_local std::vector<float> right, left, projection;
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / g, end = std::min(j1, (block + 1) * g);
    const int32_t* terms = row_ptr<int32_t>(*f_.block_terms, 0, 0, block);
    const int64_t first = terms[0], rank = terms[1];
    if (rank > 0) {
      right.resize(static_cast<std::size_t>(rank * d));
      left.resize(static_cast<std::size_t>(rank * g));
      projection.resize(static_cast<std::size_t>(n_queries * rank));
      lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(*f_.key_right, b, h, first), right.data(), rank * d);
      lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(*f_.key_left, b, h, first), left.data(), rank * g);
      lm::kernels::tiles::score_rows(prepared, pd, n_queries, right.data(), d, rank, d, projection.data(), rank);
      lm::kernels::tiles::accumulate_rows(projection.data(), rank, n_queries, left.data() + (a - block * g), g, rank,
                                          end - a, scores + (a - j0), ld);
    }
    a = end;
  }
}

void LowRankRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                  int64_t ld, float* acc, attention::TileScratch& scratch) const {
  dense_.accumulate_tile(b, h, j0, j1, weights, n_queries, ld, acc, scratch);
  const int64_t g = f_.group, dv = value_dim();
  thread_local std::vector<float> left, coefficient;
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / g, end = std::min(j1, (block + 1) * g);
    const int32_t* terms = row_ptr<int32_t>(*f_.block_terms, 0, 0, block);
    const int64_t first = terms[2], rank = terms[3];
    if (rank > 0) {
      left.resize(static_cast<std::size_t>(rank * g));
      coefficient.resize(static_cast<std::size_t>(n_queries * rank));
      lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(*f_.value_left, b, h, first), left.data(), rank * g);
      // coefficient[r][i] = sum over the tile's rows of the block of w[r][t] left_i[t].
      lm::kernels::tiles::score_rows(weights + (a - j0), ld, n_queries, left.data() + (a - block * g), g, rank, end - a,
                                     coefficient.data(), rank);
      lm::kernels::tiles::accumulate_rows_f16(coefficient.data(), rank, n_queries,
                                              row_ptr<uint16_t>(*f_.value_right, b, h, first), dv, rank, dv, acc, dv);
    }
    a = end;
  }
}

}  // namespace veloxquant
