#include "veloxquant/caches/skvq_rows.h"

#include <algorithm>

#include "veloxquant/attention/affine_word_rows.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

SkvqRows::SkvqRows(const lm::Tensor& key_codes, const lm::Tensor& value_codes, const lm::Tensor* key_order,
                   const lm::Tensor* value_order, const skvq::CodeLayout& key_layout,
                   const skvq::CodeLayout& value_layout, int64_t rows, int64_t position_base)
    : key_codes_(key_codes),
      value_codes_(value_codes),
      key_order_(key_order),
      value_order_(value_order),
      key_layout_(key_layout),
      value_layout_(value_layout),
      rows_(rows),
      position_base_(position_base) {}

void SkvqRows::decode_tile(const lm::Tensor& codes, const skvq::CodeLayout& layout, int64_t b, int64_t h, int64_t j0,
                           int64_t j1, float* out) {
  attention::kernels::AffineWordRows rows;
  rows.first_row = reinterpret_cast<const std::byte*>(row_ptr<uint32_t>(codes, b, h, j0));
  rows.row_bytes = codes.strides()[2] * static_cast<int64_t>(sizeof(uint32_t));
  rows.params_offset = layout.words * static_cast<int64_t>(sizeof(uint32_t));
  rows.n_rows = j1 - j0;
  rows.dim = layout.dim;
  rows.bits = layout.bits;
  rows.group = layout.group;
  attention::kernels::decode_affine_word_rows(rows, out);
}

void SkvqRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                          float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = key_layout_.dim, n = j1 - j0, pd = prepared_dim();
  float* tile = scratch.f32(static_cast<std::size_t>(n * d));
  decode_tile(key_codes_, key_layout_, b, h, j0, j1, tile);
  if (key_order_ == nullptr) {
    attention::kernels::score_rows(prepared, pd, n_queries, tile, d, n, d, scores, ld);
    return;
  }
  // The queries in the head's stored channel order: the dot products are then the same sums.
  const int32_t* perm = row_ptr<int32_t>(*key_order_, b, h, 0);
  float* q = scratch.f32_second(static_cast<std::size_t>(n_queries * d));
  for (int64_t r = 0; r < n_queries; ++r) {
    const float* src = prepared + r * pd;
    float* dst = q + r * d;
    for (int64_t p = 0; p < d; ++p) dst[p] = src[perm[p]];
  }
  attention::kernels::score_rows(q, d, n_queries, tile, d, n, d, scores, ld);
}

void SkvqRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                               int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t d = value_layout_.dim, n = j1 - j0;
  float* tile = scratch.f32(static_cast<std::size_t>(n * d));
  decode_tile(value_codes_, value_layout_, b, h, j0, j1, tile);
  if (value_order_ == nullptr) {
    attention::kernels::accumulate_rows(weights, ld, n_queries, tile, d, n, d, acc, d);
    return;
  }
  // Accumulated in stored order, then each query's sums scattered back to natural channels.
  const int32_t* perm = row_ptr<int32_t>(*value_order_, b, h, 0);
  float* block = scratch.f32_second(static_cast<std::size_t>(n_queries * d));
  std::fill(block, block + n_queries * d, 0.0f);
  attention::kernels::accumulate_rows(weights, ld, n_queries, tile, d, n, d, block, d);
  for (int64_t r = 0; r < n_queries; ++r) {
    const float* src = block + r * d;
    float* dst = acc + r * d;
    for (int64_t p = 0; p < d; ++p) dst[perm[p]] += src[p];
  }
}

}  // namespace veloxquant
