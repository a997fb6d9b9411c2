#include "veloxquant/caches/nsnquant_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

NsnQuantRows::NsnQuantRows(const quant::NsnTransform& key_transform, const quant::NsnTransform& value_transform,
                           const lm::Tensor& key_codes, const lm::Tensor& value_codes, const lm::Tensor& key_scales,
                           const lm::Tensor& value_scales, const lm::Tensor& key_means, const lm::Tensor& value_means,
                           const lm::Tensor& tail_keys, const lm::Tensor& tail_values, int64_t frontier, int64_t rows,
                           int64_t chunk)
    : kt_(key_transform),
      vt_(value_transform),
      key_codes_(key_codes),
      value_codes_(value_codes),
      key_scales_(key_scales),
      value_scales_(value_scales),
      key_means_(key_means),
      value_means_(value_means),
      tail_keys_(attention::PlainRows::of(tail_keys)),
      tail_values_(attention::PlainRows::of(tail_values)),
      frontier_(frontier),
      rows_(rows),
      chunk_(chunk),
      dk_(key_transform.dim()),
      dv_(value_transform.dim()),
      lut_size_(key_transform.codes_per_row() * key_transform.codebook().entries()) {}

void NsnQuantRows::prepare_query(const float* query, float* prepared) const {
  std::memcpy(prepared, query, sizeof(float) * static_cast<std::size_t>(dk_));
  float* rotated = prepared + dk_;
  kt_.rotate(query, rotated);
  const quant::NsnCodebook& book = kt_.codebook();
  const int sub = book.dim(), stages = book.stages(), entries = book.entries();
  float* lut = prepared + 2 * dk_;
  for (int64_t t = 0; t < kt_.codes_per_row(); ++t) {
    const float* q = rotated + (t / stages) * sub;
    const int stage = static_cast<int>(t % stages);
    float* row = lut + t * entries;
    for (int k = 0; k < entries; ++k) {
      const float* c = book.codeword(stage, k);
      float dot = 0.0f;
      for (int e = 0; e < sub; ++e) dot += q[e] * c[e];
      row[k] = dot;
    }
  }
}

void NsnQuantRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                              float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t pd = prepared_dim(), per_row = kt_.codes_per_row(), entries = kt_.codebook().entries();
  thread_local std::vector<float> mean, query_mean;
  const int64_t quantized_end = std::min(j1, frontier_);
  for (int64_t a = j0; a < quantized_end;) {
    const int64_t c = a / chunk_, end = std::min(quantized_end, (c + 1) * chunk_);
    mean.resize(static_cast<std::size_t>(dk_));
    lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(key_means_, b, h, c), mean.data(), dk_);
    query_mean.resize(static_cast<std::size_t>(n_queries));
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* q = prepared + r * pd + dk_;
      float s = 0.0f;
      for (int64_t e = 0; e < dk_; ++e) s += q[e] * mean[static_cast<std::size_t>(e)];
      query_mean[static_cast<std::size_t>(r)] = s;
    }
    for (int64_t j = a; j < end; ++j) {
      const uint8_t* codes = row_ptr<uint8_t>(key_codes_, b, h, j);
      const uint16_t* ab = row_ptr<uint16_t>(key_scales_, b, h, j);
      float scale_pair[2];
      lm::kernels::simd::f16_to_f32(ab, scale_pair, 2);
      for (int64_t r = 0; r < n_queries; ++r) {
        const float* lut = prepared + r * pd + 2 * dk_;
        float sum = 0.0f;
        for (int64_t t = 0; t < per_row; ++t) sum += lut[t * entries + codes[t]];
        scores[r * ld + (j - j0)] = scale_pair[0] * sum + scale_pair[1] * query_mean[static_cast<std::size_t>(r)];
      }
    }
    a = end;
  }
  if (j1 > frontier_) {  // the residual rows, from `frontier_` on in their own buffer, scored with the raw query
    const int64_t t0 = std::max(j0, frontier_), n = j1 - t0;
    float* tile = scratch.f32(static_cast<std::size_t>(n * dk_));
    tail_keys_.widen(b, h, t0 - frontier_, j1 - frontier_, tile);
    lm::kernels::tiles::score_rows(prepared, pd, n_queries, tile, dk_, n, dk_, scores + (t0 - j0), ld);
  }
}

void NsnQuantRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                   int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t quantized_end = std::min(j1, frontier_);
  if (j0 < quantized_end) {
    const int64_t n = quantized_end - j0;
    thread_local std::vector<float> mean;
    float* tile = scratch.f32(static_cast<std::size_t>(n * dv_));
    int64_t mean_chunk = -1;
    mean.resize(static_cast<std::size_t>(dv_));
    for (int64_t j = j0; j < quantized_end; ++j) {
      if (j / chunk_ != mean_chunk) {
        mean_chunk = j / chunk_;
        lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(value_means_, b, h, mean_chunk), mean.data(), dv_);
      }
      vt_.decode_rotated(row_ptr<uint8_t>(value_codes_, b, h, j), row_ptr<uint16_t>(value_scales_, b, h, j), mean.data(),
                         tile + (j - j0) * dv_);
    }
    // Per-query sums in the rotated basis, each rotated back once and added.
    float* sums = scratch.f32_second(static_cast<std::size_t>(n_queries * dv_));
    std::fill(sums, sums + n_queries * dv_, 0.0f);
    lm::kernels::tiles::accumulate_rows(weights, ld, n_queries, tile, dv_, n, dv_, sums, dv_);
    for (int64_t r = 0; r < n_queries; ++r) {
      float* s = sums + r * dv_;
      vt_.unrotate(s, s);
      float* out = acc + r * dv_;
      for (int64_t e = 0; e < dv_; ++e) out[e] += s[e];
    }
  }
  if (j1 > frontier_) {
    const int64_t t0 = std::max(j0, frontier_);
    attention::accumulate_plain_tile(tail_values_, b, h, t0 - frontier_, j1 - frontier_, weights + (t0 - j0), n_queries,
                                     ld, acc, scratch);
  }
}

}  // namespace veloxquant
