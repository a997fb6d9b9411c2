#include "veloxquant/caches/turboquant_rvq_row_source.h"

#include <vector>

#include "base/half.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/caches/group_affine_rows.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant {

using cache_rows::row_ptr;

TurboQuantRvqRows::TurboQuantRvqRows(const quant::TurboQuantRvq& quantizer, const attention::CodeOrder& key_order,
                                     const lm::Tensor& packed1, const lm::Tensor& packed2, const lm::Tensor& norms,
                                     const lm::Tensor& plain_values, const lm::Tensor& value_codes,
                                     const lm::Tensor& value_params, const attention::CodeOrder* value_order,
                                     int64_t value_group, int64_t value_dim, int64_t rows)
    : quantizer_(quantizer),
      key_order_(key_order),
      packed1_(packed1),
      packed2_(packed2),
      norms_(norms),
      plain_values_(value_order ? attention::PlainRows{} : attention::PlainRows::of(plain_values)),
      value_codes_(value_codes),
      value_params_(value_params),
      value_order_(value_order),
      value_group_(value_group),
      value_dim_(value_dim),
      rows_(rows) {}

void TurboQuantRvqRows::prepare_query(const float* query, float* prepared) const {
  // Rotated once, then laid out in the order the codes unpack in.
  thread_local std::vector<float> rotated;
  rotated.resize(static_cast<std::size_t>(key_dim()));
  quantizer_.rotation().forward(query, rotated.data());
  key_order_.permute(rotated.data(), prepared);
}

void TurboQuantRvqRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                   int64_t n_queries, float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = key_dim(), n = j1 - j0, stream = packed1_.dim(3);
  float* tile = scratch.f32(static_cast<std::size_t>(n * d));
  const float* c1 = quantizer_.stage1_codebook().centroids.data();
  const float* c2 = quantizer_.stage2_codebook().centroids.data();
  const uint8_t* s1 = row_ptr<uint8_t>(packed1_, b, h, j0);
  const uint8_t* s2 = row_ptr<uint8_t>(packed2_, b, h, j0);
  const int64_t row_stride = packed1_.strides()[2];
  if (key_order_.planar()) {
    attention::kernels::centroid_planes(s1, s2, row_stride, n, stream, quantizer_.bits(), c1, c2, tile);
  } else {
    // b = 3, 5, 6, 7: codes straddle bytes; unpacked per row, looked up in natural order.
    thread_local std::vector<uint8_t> i1, i2;
    i1.resize(static_cast<std::size_t>(d));
    i2.resize(static_cast<std::size_t>(d));
    for (int64_t j = 0; j < n; ++j) {
      core::unpack_dense(s1 + j * row_stride, static_cast<std::size_t>(d), quantizer_.bits(), i1.data());
      core::unpack_dense(s2 + j * row_stride, static_cast<std::size_t>(d), quantizer_.bits(), i2.data());
      for (int64_t e = 0; e < d; ++e) tile[j * d + e] = c1[i1[static_cast<std::size_t>(e)]] + c2[i2[static_cast<std::size_t>(e)]];
    }
  }
  attention::kernels::score_rows(prepared, d, n_queries, tile, d, n, d, scores, ld);
  const uint16_t* norms = row_ptr<uint16_t>(norms_, b, h, j0);
  const int64_t norm_stride = norms_.strides()[2];
  for (int64_t j = 0; j < n; ++j) {
    const float norm = base::bf16_to_f32(norms[j * norm_stride]);
    for (int64_t r = 0; r < n_queries; ++r) scores[r * ld + j] *= norm;
  }
}

void TurboQuantRvqRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                        int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  if (value_order_) {
    accumulate_group_affine_values(value_codes_, value_params_, *value_order_, value_group_, b, h, j0, j1, weights,
                                   n_queries, ld, acc, scratch);
  } else {
    attention::accumulate_plain_tile(plain_values_, b, h, j0, j1, weights, n_queries, ld, acc, scratch);
  }
}

}  // namespace veloxquant
