#include "veloxquant/caches/svdq_rows.h"

#include <algorithm>

#include "base/half.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/svdq_latent_decode.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

SvdqRows::SvdqRows(const lm::Tensor& codes, const lm::Tensor& params, const lm::Tensor& basis,
                   const lm::Tensor& values, const SvdqLayout& layout, int64_t rows, int group, bool leading_mean)
    : codes_(codes), params_(params), basis_(basis), values_(attention::PlainRows::of(values)), layout_(layout),
      rows_(rows), group_(group), leading_mean_(leading_mean) {}

void SvdqRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                          float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t coded = layout_.coded, dk = layout_.dim, n = j1 - j0;
  const int64_t lead = leading_mean_ ? 1 : 0, width = lead + coded;
  // Projected queries [n_queries, width] (column 0 = <q, mean> with a leading mean row, then
  // <q, basis_i>) and the tile's latent rows [n, coded], side by side.
  float* projected = scratch.f32_second(static_cast<std::size_t>(n_queries * width));
  attention::kernels::score_rows(prepared, dk, n_queries, row_ptr<float>(basis_, b, h, 0), dk, width, dk, projected,
                                 width);
  float* latent = scratch.f32(static_cast<std::size_t>(n * coded + 2 * coded));
  float* scale = latent + n * coded;  // the current block's (scale, min) per coded channel, in f32
  float* min = scale + coded;
  // Block by block (a tile spans at most a few): the block's params converted once, then its
  // rows of the tile decoded in one call (svdq_latent_decode.h).
  for (int64_t j = j0; j < j1;) {
    const int64_t block = j / group_, end = std::min(j1, (block + 1) * group_);
    const uint16_t* params = row_ptr<uint16_t>(params_, b, h, block);
    for (int64_t i = 0; i < coded; ++i) {
      scale[i] = base::f16_to_f32(params[2 * i]);
      min[i] = base::f16_to_f32(params[2 * i + 1]);
    }
    const uint8_t* first = row_ptr<uint8_t>(codes_, b, h, j);
    decode_latent_rows(layout_, first, layout_.row_bytes, end - j, scale, min, latent + (j - j0) * coded);
    j = end;
  }
  attention::kernels::score_rows(projected + lead, width, n_queries, latent, coded, n, coded, scores, ld);
  if (!leading_mean_) return;
  for (int64_t r = 0; r < n_queries; ++r) {
    const float shift = projected[r * width];
    float* row = scores + r * ld;
    for (int64_t jj = 0; jj < n; ++jj) row[jj] += shift;
  }
}

void SvdqRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                               int64_t ld, float* acc, attention::TileScratch& scratch) const {
  attention::accumulate_plain_tile(values_, b, h, j0, j1, weights, n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
