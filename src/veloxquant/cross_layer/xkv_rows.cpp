#include "veloxquant/cross_layer/xkv_rows.h"

#include <algorithm>

#include "base/half.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/svdq_latent_decode.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

SvdqLayout xkv_latent_layout(int64_t dim, int64_t coded, int bits) {
  SvdqLayout layout;
  layout.dim = dim;
  layout.coded = coded;
  for (int64_t i = 0; i < coded; ++i) layout.latent_of.push_back(i);
  for (int64_t first = 0; first < coded; first += 8) {
    SvdqGroup g;
    g.first = first;
    g.channels = std::min<int64_t>(8, coded - first);
    g.bits = bits;
    g.byte_offset = layout.row_bytes;
    layout.row_bytes += static_cast<int64_t>(core::dense_bytes(static_cast<std::size_t>(g.channels), bits));
    layout.groups.push_back(g);
  }
  return layout;
}

XkvRows::XkvRows(const lm::Tensor& codes, const lm::Tensor& params, const lm::Tensor& table, const lm::Tensor& values,
                 const SvdqLayout& layout, int64_t rows, int group)
    : codes_(codes), params_(params), table_(table), values_(attention::PlainRows::of(values)), layout_(layout),
      rows_(rows), group_(group) {}

void XkvRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                         float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t coded = layout_.coded, dk = layout_.dim, n = j1 - j0, width = 1 + coded;
  // Projected queries [n_queries, 1 + coded]: column 0 = <q, mean>, then <q, V_i>.
  float* projected = scratch.f32_second(static_cast<std::size_t>(n_queries * width));
  attention::kernels::score_rows(prepared, dk, n_queries, row_ptr<float>(table_, b, h, 0), dk, width, dk, projected,
                                 width);
  float* latent = scratch.f32(static_cast<std::size_t>(n * coded + 2 * coded));
  float* scale = latent + n * coded;
  float* min = scale + coded;
  for (int64_t j = j0; j < j1;) {
    const int64_t block = j / group_, end = std::min(j1, (block + 1) * group_);
    const uint16_t* params = row_ptr<uint16_t>(params_, b, h, block);
    for (int64_t i = 0; i < coded; ++i) {
      scale[i] = base::f16_to_f32(params[2 * i]);
      min[i] = base::f16_to_f32(params[2 * i + 1]);
    }
    decode_latent_rows(layout_, row_ptr<uint8_t>(codes_, b, h, j), layout_.row_bytes, end - j, scale, min,
                       latent + (j - j0) * coded);
    j = end;
  }
  attention::kernels::score_rows(projected + 1, width, n_queries, latent, coded, n, coded, scores, ld);
  for (int64_t r = 0; r < n_queries; ++r) {
    const float shift = projected[r * width];
    float* row = scores + r * ld;
    for (int64_t jj = 0; jj < n; ++jj) row[jj] += shift;
  }
}

void XkvRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                              int64_t ld, float* acc, attention::TileScratch& scratch) const {
  attention::accumulate_plain_tile(values_, b, h, j0, j1, weights, n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
