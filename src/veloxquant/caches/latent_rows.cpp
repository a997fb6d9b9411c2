#include "veloxquant/caches/latent_rows.h"

#include <algorithm>

#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

int64_t LatentSide::rank(int64_t b, int64_t g) const { return row_ptr<int32_t>(ranks, b, g, 0)[0]; }
const float* LatentSide::basis_row(int64_t b, int64_t g, int64_t i) const { return row_ptr<float>(basis, b, g, i); }
const float* LatentSide::mean_row(int64_t b, int64_t g) const { return row_ptr<float>(mean, b, g, 0); }
const uint8_t* LatentSide::code_row(int64_t b, int64_t g, int64_t j) const { return row_ptr<uint8_t>(codes, b, g, j); }

LatentRows::LatentRows(const LatentSide& keys, const LatentSide& values, int64_t heads_per_group, int64_t rows)
    : keys_(keys), values_(values), heads_per_group_(heads_per_group), rows_(rows) {}

void LatentRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                            float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t g = h / heads_per_group_, r = keys_.rank(b, g), n = j1 - j0;
  float* latent = scratch.f32(static_cast<std::size_t>(n * r));
  keys_.codec->decode_rows(b, g, keys_.code_row(b, g, j0), keys_.row_stride(), n, latent);
  attention::kernels::score_rows(prepared, keys_.max_rank, n_queries, latent, r, n, r, scores, ld);
}

void LatentRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                 int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t g = h / heads_per_group_, r = values_.rank(b, g), n = j1 - j0;
  float* latent = scratch.f32(static_cast<std::size_t>(n * r));
  values_.codec->decode_rows(b, g, values_.code_row(b, g, j0), values_.row_stride(), n, latent);
  attention::kernels::accumulate_rows(weights, ld, n_queries, latent, r, n, r, acc, values_.max_rank);
}

void project_queries(const LatentSide& keys, int64_t kv_heads, int64_t heads_per_group, const float* queries,
                     int64_t batch, int64_t q_heads, int64_t n, float* projected) {
  const int64_t d = keys.dim, rk = keys.max_rank, per_kv = q_heads / kv_heads;
  std::fill(projected, projected + batch * q_heads * n * rk, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qh = 0; qh < q_heads; ++qh) {
      const int64_t h = qh / per_kv, g = h / heads_per_group, local = h % heads_per_group;
      const int64_t at = (b * q_heads + qh) * n;
      // The basis rows restricted to this head's D columns act as r "rows" to score the query on.
      attention::kernels::score_rows(queries + at * d, d, n, keys.basis_row(b, g, 0) + local * d, keys.width,
                                     keys.rank(b, g), d, projected + at * rk, rk);
    }
  }
}

void reconstruct_outputs(const LatentSide& values, int64_t kv_heads, int64_t heads_per_group, const float* latents,
                         int64_t batch, int64_t q_heads, int64_t n, float* out) {
  const int64_t d = values.dim, rv = values.max_rank, per_kv = q_heads / kv_heads;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qh = 0; qh < q_heads; ++qh) {
      const int64_t h = qh / per_kv, g = h / heads_per_group, local = h % heads_per_group;
      const int64_t at = (b * q_heads + qh) * n;
      const float* mu = values.mean_row(b, g) + local * d;
      for (int64_t i = 0; i < n; ++i) std::copy_n(mu, d, out + (at + i) * d);
      // out_i += sum_c a_i[c] * U_h[c]: the latent sums are the weights, the basis rows the rows.
      attention::kernels::accumulate_rows(latents + at * rv, rv, n, values.basis_row(b, g, 0) + local * d, values.width,
                                          values.rank(b, g), d, out + at * d, d);
    }
  }
}

}  // namespace veloxquant
