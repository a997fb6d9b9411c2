#include "veloxquant/caches/kivi_row_source.h"

#include <algorithm>

#include "base/half.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/float_key_scores.h"
#include "veloxquant/attention/integer_key_scores.h"
#include "veloxquant/attention/level_lookup.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/caches/group_affine_rows.h"
#include "veloxquant/core/group_quant.h"

namespace veloxquant {

using cache_rows::row_ptr;

KiviQuantizedRows::KiviQuantizedRows(const lm::Tensor& key_codes, const lm::Tensor& key_params,
                                     const lm::Tensor& value_codes, const lm::Tensor& value_params, int64_t rows,
                                     int bits, int group, const attention::CodeOrder& key_order,
                                     const attention::CodeOrder& value_order, const lm::Tensor* levels)
    : key_codes_(key_codes),
      key_params_(key_params),
      value_codes_(value_codes),
      value_params_(value_params),
      rows_(rows),
      bits_(bits),
      group_(group),
      key_group_(group),
      key_order_(key_order),
      value_order_(value_order),
      levels_(levels) {}

const int32_t* KiviQuantizedRows::positions(int64_t b, int64_t h) const {
  return positions_ == nullptr ? nullptr : row_ptr<int32_t>(*positions_, b, h, 0);
}

WordPlaneKeys::WordPlaneKeys(int bits, int64_t key_dim) : planes(attention::kernels::word_planes(bits, key_dim)) {
  pair_index.resize(static_cast<std::size_t>(planes.dim()));
  for (int64_t e = 0; e < planes.dim(); ++e) {
    const int64_t i = planes.natural(e);
    pair_index[static_cast<std::size_t>(e)] = static_cast<int32_t>(i < 0 ? key_dim : i);
  }
}

void KiviQuantizedRows::prepare_query(const float* query, float* prepared) const {
  if (word_keys_ != nullptr) {
    // Through the precomputed channel of each position (key_dim at padding): no divisions.
    const int64_t d = key_dim();
    const int32_t* channel = word_keys_->pair_index.data();
    for (int64_t e = 0, dim = word_keys_->planes.dim(); e < dim; ++e) {
      prepared[e] = channel[e] < d ? query[channel[e]] : 0.0f;
    }
    return;
  }
  key_order_.permute(query, prepared);  // the order the key codes unpack in
}

int64_t KiviQuantizedRows::prepared_position(int64_t i) const {
  if (word_keys_ != nullptr) return word_keys_->planes.position(i);
  for (int64_t e = 0; e < key_order_.size(); ++e) {
    if (key_order_.natural(e) == i) return e;
  }
  return -1;
}

// Keys by word planes: per key group, the (scale, min) pairs in the padded code order (a zero
// pair at padding), folded into every query, then the group's rows scored from their words.
void KiviQuantizedRows::score_word_planes(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                          int64_t n_queries, float* scores, int64_t ld,
                                          attention::TileScratch& scratch) const {
  const int64_t d = key_dim(), dim = word_keys_->planes.dim();
  float* pairs = scratch.f32(static_cast<std::size_t>(2 * d + 2 + 2 * dim + n_queries * dim + n_queries));
  float* scale = pairs + 2 * d + 2;
  float* min = scale + dim;
  float* folded = min + dim;
  float* bias = folded + n_queries * dim;
  pairs[2 * d] = pairs[2 * d + 1] = 0.0f;
  const uint32_t* first_row = row_ptr<uint32_t>(key_codes_, b, h, j0);
  const int64_t row_words = key_codes_.strides()[2];
  const float* level = levels_ != nullptr ? row_ptr<float>(*levels_, b, h, 0) : nullptr;
  for (int64_t a = j0; a < j1;) {
    const int64_t g = a / key_group_, end = std::min(j1, (g + 1) * key_group_);
    lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(key_params_, b, h, g), pairs, 2 * d);
    attention::kernels::gather_pairs(pairs, word_keys_->pair_index.data(), dim, scale, min);
    attention::kernels::fold_scales(prepared, n_queries, dim, scale, min, folded, bias);
    attention::kernels::score_word_planes(first_row + (a - j0) * row_words, row_words, end - a, word_keys_->planes,
                                          level, folded, n_queries, bias, scores + (a - j0), ld);
    a = end;
  }
}

void KiviQuantizedRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                   int64_t n_queries, float* scores, int64_t ld,
                                   attention::TileScratch& scratch) const {
  if (word_keys_ != nullptr) {
    score_word_planes(b, h, j0, j1, prepared, n_queries, scores, ld, scratch);
    return;
  }
  const int64_t d = key_dim(), n = j1 - j0;
  const int64_t plane_bytes = d * bits_ / 8;
  // Plain codes read by planes score as integers (attention/integer_key_scores.h); fitted
  // levels and other widths go through an f32 tile of the codes.
  const bool from_codes = levels_ == nullptr && key_order_.planar();
  // 4-bit keys take the f32 query always: with the plane size known at compile time it costs fewer
  // instructions per row than the integer path with its 16-bit query fold (kivi 4: 77 -> 72 per
  // row for fold and scores at ctx 1024) and rounds nothing. 2- and 8-bit keys stay integer unless
  // the cache asks (the integer path reads twice the codes per instruction there).
  const bool in_f32 =
      from_codes && (float_keys_ || bits_ == 4) && attention::kernels::can_score_codes_f32(bits_, plane_bytes);
  const bool integer = from_codes && !in_f32 && attention::kernels::can_score_codes_i16(bits_, plane_bytes);
  // Scratch: the tile's codes [n, d] (f32 path only), folded queries [n_queries, d], the group's
  // (scale, min) pairs widened [2 d] and in code order [2 d], the queries' biases and steps.
  const int64_t tile_floats = integer || in_f32 ? 0 : n * d;
  float* codes = scratch.f32(static_cast<std::size_t>(tile_floats + n_queries * d + 4 * d + 2 * n_queries));
  float* folded = codes + tile_floats;
  float* pairs = folded + n_queries * d;
  float* scale = pairs + 2 * d;
  float* min = scale + d;
  float* bias = min + d;
  float* step = bias + n_queries;
  auto* q16 = reinterpret_cast<int16_t*>(scratch.u8(static_cast<std::size_t>(n_queries * d) * sizeof(int16_t)));
  const uint32_t* first_row = row_ptr<uint32_t>(key_codes_, b, h, j0);
  const int64_t row_words = key_codes_.strides()[2];
  if (!integer && !in_f32) {
    // The tile's codes (or, with fitted levels, the levels they stand for): planar widths by the
    // code order's SIMD unpack, the others by word gathers that read the level table directly.
    const float* level = levels_ != nullptr ? row_ptr<float>(*levels_, b, h, 0) : nullptr;
    if (key_order_.planar()) {
      key_order_.unpack_rows(first_row, row_words, n, codes);
      if (level != nullptr) attention::kernels::lookup_levels(codes, n * d, level, 1 << bits_);
    } else {
      attention::kernels::unpack_word_rows(first_row, row_words, n, d, bits_, level, codes);
    }
  }
  const int32_t limit = attention::kernels::integer_query_limit(bits_, d);
  for (int64_t a = j0; a < j1;) {
    const int64_t g = a / key_group_, end = std::min(j1, (g + 1) * key_group_);
    // The group's per-channel (scale, min) f16 pairs in one SIMD widening, then into code order.
    lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(key_params_, b, h, g), pairs, 2 * d);
    attention::kernels::gather_pairs(pairs, key_order_.natural_indices().data(), d, scale, min);
    // The scales folded into every query of the block (prepared in code order), then one pass
    // over the rows for all of them; the mins add a per-query constant.
    if (integer) {
      attention::kernels::fold_queries_i16(prepared, n_queries, d, scale, min, limit, q16, step, bias);
      attention::kernels::score_codes_i16({reinterpret_cast<const uint8_t*>(first_row + (a - j0) * row_words),
                                           row_words * 4, end - a, plane_bytes, bits_},
                                          {q16, step, bias, n_queries}, scores + (a - j0), ld);
    } else if (in_f32) {
      attention::kernels::fold_scales(prepared, n_queries, d, scale, min, folded, bias);
      attention::kernels::score_codes_f32(reinterpret_cast<const uint8_t*>(first_row + (a - j0) * row_words),
                                          row_words * 4, end - a, plane_bytes, bits_, folded, bias, n_queries,
                                          scores + (a - j0), ld);
    } else {
      attention::kernels::fold_scales(prepared, n_queries, d, scale, min, folded, bias);
      attention::kernels::score_rows(folded, d, n_queries, codes + (a - j0) * d, d, end - a, d, scores + (a - j0), ld);
      for (int64_t r = 0; r < n_queries; ++r) {
        for (int64_t j = a; j < end; ++j) scores[r * ld + (j - j0)] += bias[r];
      }
    }
    a = end;
  }
}

void KiviQuantizedRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                        int64_t n_queries, int64_t ld, float* acc,
                                        attention::TileScratch& scratch) const {
  accumulate_group_affine_rows(
      group_affine_value_rows(value_codes_, value_params_, value_order_, group_, b, h, j0, j1,
                              levels_ != nullptr ? row_ptr<float>(*levels_, b, h, 1) : nullptr),
      {weights, n_queries, ld}, acc, scratch);
}

void PaddedQueryRows::prepare_query(const float* query, float* prepared) const {
  const int64_t own = inner_.prepared_dim();
  inner_.prepare_query(query, prepared);
  std::fill(prepared + own, prepared + prepared_dim_, 0.0f);
}

void PaddedQueryRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                                 float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t own = inner_.prepared_dim();
  float* queries = scratch.f32_second(static_cast<std::size_t>(n_queries * own));
  for (int64_t r = 0; r < n_queries; ++r) std::copy_n(prepared + r * prepared_dim_, own, queries + r * own);
  inner_.score_tile(b, h, j0, j1, queries, n_queries, scores, ld, scratch);
}

}  // namespace veloxquant
