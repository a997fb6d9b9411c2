#include "veloxquant/caches/nsnquant_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/codeword_sum_rows.h"
#include "veloxquant/attention/tile_kernels.h"
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
      dv_(value_transform.dim()) {}

namespace {
// Row `row` of head (b, h) of a contiguous [B, H, cap, W] tensor, from a base pointer and strides
// read once per tile (row_ptr's accessor calls per row showed in the instruction counts).
struct HeadRows {
  const std::byte* base;
  int64_t stride;  // bytes between rows
  template <class T>
  const T* row(int64_t j) const {
    return reinterpret_cast<const T*>(base + j * stride);
  }
};
template <class T>
HeadRows head_rows(const lm::Tensor& t, int64_t b, int64_t h) {
  return {reinterpret_cast<const std::byte*>(row_ptr<T>(t, b, h, 0)), t.strides()[2] * static_cast<int64_t>(sizeof(T))};
}
// Rows [j0, j0 + n) of (b, h)'s f16 (a, b) pairs [B, H, cap, 2] widened to f32 pairs.
void widen_pairs(const lm::Tensor& pairs, int64_t b, int64_t h, int64_t j0, int64_t n, float* out) {
  if (pairs.strides()[2] == 2) {  // rows side by side: one conversion for the tile
    lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(pairs, b, h, j0), out, 2 * n);
    return;
  }
  for (int64_t j = 0; j < n; ++j) lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(pairs, b, h, j0 + j), out + 2 * j, 2);
}
// Rows [j0, j0 + n) of (b, h)'s f16 (a, b) pairs as two f32 columns: out[j] = a_j, out[n + j] =
// b_j (one SIMD deinterleave for rows side by side; `out` holds 4 n floats, the upper half scratch).
void split_pairs(const lm::Tensor& pairs, int64_t b, int64_t h, int64_t j0, int64_t n, float* out) {
  if (pairs.strides()[2] == 2) {
    attention::kernels::f16_columns(row_ptr<uint16_t>(pairs, b, h, j0), n, 2, out);
    return;
  }
  float* widened = out + 2 * n;
  widen_pairs(pairs, b, h, j0, n, widened);
  for (int64_t j = 0; j < n; ++j) {
    out[j] = widened[2 * j];
    out[n + j] = widened[2 * j + 1];
  }
}

// Up to this many query rows per call (a decode step's GQA group of 3 and a little more) the rows
// are used straight from their codes; a prefill block of more queries decodes the tile once into
// scratch and lets the shared tile kernels read it for all of them (a register decode per query
// block would repeat the decode n_queries / 3 times).
constexpr int64_t kFusedQueries = 4;
}  // namespace

void NsnQuantRows::prepare_query(const float* query, float* prepared) const {
  std::memcpy(prepared, query, sizeof(float) * static_cast<std::size_t>(dk_));
  kt_.rotate(query, prepared + dk_);
}

void NsnQuantRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                              float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t pd = prepared_dim();
  thread_local std::vector<float> query_mean, scale_ab;
  const int64_t quantized_end = std::min(j1, frontier_);
  if (j0 < quantized_end) {
    // <q', z^_j> for the whole tile, each sub-vector's codeword sum decoded into a register and
    // multiplied into every query at once (attention/codeword_sum_rows.h; a decoded f32 tile
    // stored and read back by the tile kernel had cost ~70 instructions per kv row more), then
    // each score finished as a_j <q', z^_j> + b_j <q', mu_c>.
    const int64_t n = quantized_end - j0;
    const quant::NsnCodebook& book = kt_.codebook();
    const attention::kernels::CodewordSumTile rows{row_ptr<uint8_t>(key_codes_, b, h, j0),
                                                   key_codes_.strides()[2],
                                                   n,
                                                   kt_.subvectors(),
                                                   book.stages(),
                                                   book.codeword(0, 0),
                                                   static_cast<int64_t>(book.entries()) * book.dim(),
                                                   book.dim()};
    if (n_queries <= kFusedQueries) {
      attention::kernels::codeword_sum_scores(rows, prepared + dk_, pd, n_queries, scores, ld);
    } else {  // a prefill block: the tile decoded once and read by all its queries
      float* tile = scratch.f32(static_cast<std::size_t>(n * dk_));
      attention::kernels::codeword_sum_rows(rows, tile, dk_);
      lm::kernels::tiles::score_rows(prepared + dk_, pd, n_queries, tile, dk_, n, dk_, scores, ld);
    }
    // The rows' (a, b) pairs as an a column and a b column, so that the per-row finishing runs
    // over contiguous floats (the compiler vectorizes it; with the pairs interleaved it did not).
    scale_ab.resize(static_cast<std::size_t>(4 * n));
    split_pairs(key_scales_, b, h, j0, n, scale_ab.data());
    const float* scale_a = scale_ab.data();
    const float* scale_b = scale_a + n;
    query_mean.resize(static_cast<std::size_t>(n_queries));
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t c = a / chunk_, end = std::min(quantized_end, (c + 1) * chunk_);
      const uint16_t* mu = row_ptr<uint16_t>(key_means_, b, h, c);
      for (int64_t r = 0; r < n_queries; ++r) {  // <q', mu_c>, once per chunk, from the f16 mean (SIMD)
        query_mean[static_cast<std::size_t>(r)] = lm::kernels::simd::dot_f16(mu, prepared + r * pd + dk_, dk_);
      }
      for (int64_t r = 0; r < n_queries; ++r) {
        const float qm = query_mean[static_cast<std::size_t>(r)];
        float* row = scores + r * ld;
        for (int64_t j = a - j0; j < end - j0; ++j) row[j] = scale_a[j] * row[j] + scale_b[j] * qm;
      }
      a = end;
    }
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
  // The accumulator stays in the rotated basis for the whole call (finish_row rotates each finished
  // row back once): the codes' rows need no rotation per tile, and the residual rows' weighted sum
  // is rotated once per query per tile (the rotation is linear). Rotating every tile's sums back
  // per query had cost ~40 instructions per kv row in Hadamard transforms.
  const int64_t quantized_end = std::min(j1, frontier_);
  if (j0 < quantized_end) {
    // sum_j w_j (a_j z^_j + b_j mu_c) = sum_j (w_j a_j) z^_j + sum_c (sum_{j in c} w_j b_j) mu_c:
    // the weights folded with a, the codes' rows accumulated from their codeword sums, the means
    // added once per chunk.
    const int64_t n = quantized_end - j0;
    const quant::NsnCodebook& book = vt_.codebook();
    const int sub = book.dim(), stages = book.stages();
    const int64_t nsub = vt_.subvectors();
    const HeadRows codes = head_rows<uint8_t>(value_codes_, b, h);
    thread_local std::vector<float> folded, pairs;
    pairs.resize(static_cast<std::size_t>(4 * n));
    split_pairs(value_scales_, b, h, j0, n, pairs.data());
    const float* scale_a = pairs.data();
    const float* scale_b = scale_a + n;
    folded.resize(static_cast<std::size_t>(n_queries * n));
    for (int64_t r = 0; r < n_queries; ++r) {
      const float* w = weights + r * ld;
      float* f = folded.data() + r * n;
      for (int64_t j = 0; j < n; ++j) f[j] = w[j] * scale_a[j];
    }
    // Each sub-vector's codeword sum decoded into a register and accumulated at once (no f32 tile).
    const attention::kernels::CodewordSumTile rows{codes.row<uint8_t>(j0),
                                                   codes.stride,
                                                   n,
                                                   nsub,
                                                   stages,
                                                   book.codeword(0, 0),
                                                   static_cast<int64_t>(book.entries()) * sub,
                                                   sub};
    if (n_queries <= kFusedQueries) {
      attention::kernels::codeword_sum_accumulate(rows, folded.data(), n, n_queries, acc, dv_);
    } else {  // a prefill block: the tile decoded once and read by all its queries
      float* tile = scratch.f32(static_cast<std::size_t>(n * dv_));
      attention::kernels::codeword_sum_rows(rows, tile, dv_);
      lm::kernels::tiles::accumulate_rows(folded.data(), n, n_queries, tile, dv_, n, dv_, acc, dv_);
    }
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t c = a / chunk_, end = std::min(quantized_end, (c + 1) * chunk_);
      const uint16_t* mu = row_ptr<uint16_t>(value_means_, b, h, c);
      for (int64_t r = 0; r < n_queries; ++r) {  // (sum_j w_j b_j) mu_c, by SIMD dot and f16 axpy
        const float wb = lm::kernels::simd::dot_f32(weights + r * ld + (a - j0), scale_b + (a - j0), end - a);
        lm::kernels::simd::axpy_f16(wb, mu, acc + r * dv_, dv_);
      }
      a = end;
    }
  }
  if (j1 > frontier_) {
    // The residual rows in the model's basis into a zeroed block, rotated once per query.
    const int64_t t0 = std::max(j0, frontier_);
    float* sums = scratch.f32_second(static_cast<std::size_t>(2 * n_queries * dv_));
    float* rotated = sums + n_queries * dv_;
    std::fill(sums, sums + n_queries * dv_, 0.0f);
    attention::accumulate_plain_tile(tail_values_, b, h, t0 - frontier_, j1 - frontier_,
                                     {weights + (t0 - j0), n_queries, ld}, sums, scratch);
    for (int64_t r = 0; r < n_queries; ++r) {
      vt_.rotate(sums + r * dv_, rotated);
      float* out = acc + r * dv_;
      for (int64_t e = 0; e < dv_; ++e) out[e] += rotated[e];
    }
  }
}

void NsnQuantRows::finish_row(float* row) const { vt_.unrotate(row, row); }

}  // namespace veloxquant
