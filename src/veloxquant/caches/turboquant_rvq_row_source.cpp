#include "veloxquant/caches/turboquant_rvq_row_source.h"

#include <cstring>
#include <vector>

#include "base/half.h"
#include "veloxquant/attention/prefetch.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/caches/group_affine_rows.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant {

using cache_rows::row_ptr;

TurboQuantRvqRows::TurboQuantRvqRows(const quant::TurboQuantRvq& quantizer, const attention::CodeOrder& key_order,
                                     const lm::Tensor& packed1, const lm::Tensor& packed2, const lm::Tensor& norms,
                                     const RvqValueRows& values, int64_t rows)
    : quantizer_(quantizer),
      key_order_(key_order),
      packed1_(packed1),
      packed2_(packed2),
      norms_(norms),
      plain_values_(values.order ? attention::PlainRows{} : attention::PlainRows::of(values.plain)),
      value_codes_(values.codes),
      value_params_(values.params),
      value_order_(values.order),
      value_group_(values.group),
      value_dim_(values.dim),
      rows_(rows),
      integer_keys_(quantizer.bits() == 2 && key_order.planar() &&
                    attention::kernels::can_score_codebook_rows(quantizer.dim())),
      integer_limit_(attention::kernels::codebook_integer_limit(quantizer.dim())) {
  if (integer_keys_) {
    levels16_ = attention::kernels::codebook_levels16(quantizer.stage1_codebook().centroids.data(),
                                                      quantizer.stage2_codebook().centroids.data(), integer_limit_);
  }
}

void TurboQuantRvqRows::prepare_query(const float* query, float* prepared) const {
  // Rotated once, then laid out in the order the codes unpack in.
  thread_local std::vector<float> rotated;
  rotated.resize(static_cast<std::size_t>(key_dim()));
  quantizer_.rotation().forward(query, rotated.data());
  if (!integer_keys_) {
    key_order_.permute(rotated.data(), prepared);
    return;
  }
  // Rounded to 16 bits once here, not once per tile: the int16 values' bytes fill the first d / 2
  // floats (the driver copies prepared queries as bytes), the step follows them.
  thread_local std::vector<float> code_order;
  thread_local std::vector<int16_t> q16;
  const int64_t d = key_dim();
  code_order.resize(static_cast<std::size_t>(d));
  q16.resize(static_cast<std::size_t>(d));
  key_order_.permute(rotated.data(), code_order.data());
  attention::kernels::quantize_codebook_query(code_order.data(), d, integer_limit_, q16.data(), prepared + d / 2);
  std::memcpy(prepared, q16.data(), static_cast<std::size_t>(d) * sizeof(int16_t));
}

void TurboQuantRvqRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                   int64_t n_queries, float* scores, int64_t ld,
                                   attention::TileScratch& scratch) const {
  const int64_t d = key_dim(), n = j1 - j0, stream = packed1_.dim(3);
  const float* c1 = quantizer_.stage1_codebook().centroids.data();
  const float* c2 = quantizer_.stage2_codebook().centroids.data();
  const uint8_t* s1 = row_ptr<uint8_t>(packed1_, b, h, j0);
  const uint8_t* s2 = row_ptr<uint8_t>(packed2_, b, h, j0);
  const int64_t row_stride = packed1_.strides()[2];
  float* tile = nullptr;
  if (integer_keys_) {
    // The prepared queries' int16 bytes side by side, their steps beside them.
    const int64_t pd = prepared_dim();
    auto* q16 = reinterpret_cast<int16_t*>(scratch.u8(static_cast<std::size_t>(n_queries * d) * sizeof(int16_t)));
    float* steps = scratch.f32(static_cast<std::size_t>(n_queries));
    for (int64_t r = 0; r < n_queries; ++r) {
      std::memcpy(q16 + r * d, prepared + r * pd, static_cast<std::size_t>(d) * sizeof(int16_t));
      steps[r] = prepared[r * pd + d / 2];
    }
    attention::kernels::score_codebook_rows({s1, s2, row_stride, n, d}, levels16_, {q16, steps, n_queries}, scores, ld);
  } else if (key_order_.planar()) {
    tile = scratch.f32(static_cast<std::size_t>(n * d));
    attention::kernels::centroid_planes(s1, s2, row_stride, n, stream, quantizer_.bits(), c1, c2, tile);
  } else {
    tile = scratch.f32(static_cast<std::size_t>(n * d));
    // b = 3, 5, 6, 7: codes straddle bytes; unpacked per row, looked up in natural order.
    thread_local std::vector<uint8_t> i1, i2;
    i1.resize(static_cast<std::size_t>(d));
    i2.resize(static_cast<std::size_t>(d));
    for (int64_t j = 0; j < n; ++j) {
      core::unpack_dense(s1 + j * row_stride, static_cast<std::size_t>(d), quantizer_.bits(), i1.data());
      core::unpack_dense(s2 + j * row_stride, static_cast<std::size_t>(d), quantizer_.bits(), i2.data());
      for (int64_t e = 0; e < d; ++e)
        tile[j * d + e] = c1[i1[static_cast<std::size_t>(e)]] + c2[i2[static_cast<std::size_t>(e)]];
    }
  }
  if (!integer_keys_) attention::kernels::score_rows(prepared, d, n_queries, tile, d, n, d, scores, ld);
  // Each row's bf16 norm scales its scores: widened once per row, then a contiguous pass per query.
  const uint16_t* norms = row_ptr<uint16_t>(norms_, b, h, j0);
  const int64_t norm_stride = norms_.strides()[2];
  float norm[attention::kTileRows];
  for (int64_t j = 0; j < n; ++j) norm[j] = base::bf16_to_f32(norms[j * norm_stride]);
  for (int64_t r = 0; r < n_queries; ++r) {
    float* row = scores + r * ld;
    for (int64_t j = 0; j < n; ++j) row[j] *= norm[j];
  }
}

void TurboQuantRvqRows::prefetch_tile(int64_t b, int64_t h, int64_t j0, int64_t j1) const {
  using attention::prefetch_bytes;
  // Rows of one head are back to back in every buffer: one contiguous range each.
  const auto bytes_of = [&](const lm::Tensor& t) {
    return (j1 - j0) * t.strides()[2] * static_cast<int64_t>(t.element_size());
  };
  prefetch_bytes(row_ptr<uint8_t>(packed1_, b, h, j0), bytes_of(packed1_));
  prefetch_bytes(row_ptr<uint8_t>(packed2_, b, h, j0), bytes_of(packed2_));
  prefetch_bytes(row_ptr<uint16_t>(norms_, b, h, j0), bytes_of(norms_));
  if (value_order_) {
    prefetch_bytes(row_ptr<uint32_t>(value_codes_, b, h, j0), bytes_of(value_codes_));
    prefetch_bytes(row_ptr<uint16_t>(value_params_, b, h, j0), bytes_of(value_params_));
  } else {
    prefetch_bytes(plain_values_.head(b, h) + j0 * plain_values_.row_bytes, (j1 - j0) * plain_values_.row_bytes);
  }
}

void TurboQuantRvqRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                        int64_t n_queries, int64_t ld, float* acc,
                                        attention::TileScratch& scratch) const {
  if (value_order_) {
    accumulate_group_affine_rows(
        group_affine_value_rows(value_codes_, value_params_, *value_order_, value_group_, b, h, j0, j1),
        {weights, n_queries, ld}, acc, scratch);
  } else {
    attention::accumulate_plain_tile(plain_values_, b, h, j0, j1, {weights, n_queries, ld}, acc, scratch);
  }
}

}  // namespace veloxquant
