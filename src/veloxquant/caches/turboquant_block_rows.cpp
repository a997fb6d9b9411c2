#include "veloxquant/caches/turboquant_block_rows.h"

#include <algorithm>
#include <cstring>

#include "base/half.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/block_level_value_sums.h"
#include "veloxquant/attention/even_byte_key_scores.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/turboquant_block_cache.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {
namespace {

// The cache's rotated mean Pi mu (f16, dim values) into out; false (out untouched) without one.
bool rotated_mean(const uint16_t* mu, int64_t dim, float* out) {
  if (mu == nullptr) return false;
  cache_rows::load_f32(reinterpret_cast<const std::byte*>(mu), lm::DType::F16, static_cast<std::size_t>(dim), out);
  return true;
}

// Queries per tile up to which rows are read from their codes; more queries (prefill tiles)
// share one decode of the tile instead. Measured per row at head_dim 64 (callgrind): decoding a
// 5-bit tile costs ~135 instructions and ~16 per query to score it; the integer path ~41 per
// query, so decoding wins from about 5 queries on; values likewise (~115 + 17 per query against
// ~39 per query).
constexpr int64_t kMaxQueriesFromCodes = 4;

}  // namespace

TurboQuantBlockRows::TurboQuantBlockRows(const TurboQuantBlockCache& cache, int64_t rows)
    : cache_(cache),
      rows_(rows),
      // 2-6-bit Lloyd keys are scored as 8-bit integers (attention/byte_level_key_scores.h):
      // exactly the integer model of the 8-bit query and levels, whose rounding is the only
      // difference from the f32 scores (ByteKeyDecodeStepsEqualTheirIntegerModel in
      // turboquant_block_cache_test: within 5e-5 of attention over that model; against exact
      // attention only within the rounding, which softmax amplifies on peaked test scores).
      // 6-bit keys (q5) too: their 64 levels lose more to the 8-bit rounding (q5's decode-like
      // KL 0.00441 -> 0.00511, still 2.6x under llama.cpp q5_0's 0.0131), but the 16-bit scorer
      // made q5 decode at 0.51x the native cache, the byte scorer's 512-bit loop at ~1x.
      byte_keys_(!cache.key_quantizer().even_levels() && cache.key_bits() >= 2 && cache.key_bits() <= 6 &&
                 attention::kernels::can_score_byte_level_rows(cache.key_bits(), cache.head_dim(),
                                                               cache.key_quantizer().block_size())),
      permuted_keys_(!byte_keys_ && !cache.key_quantizer().even_levels() &&
                     attention::kernels::can_score_permuted_level_rows(cache.key_bits(), cache.head_dim(),
                                                                       cache.key_quantizer().block_size())),
      integer_keys_(!byte_keys_ && !permuted_keys_ &&
                    attention::kernels::can_score_block_level_rows(cache.key_bits(), cache.head_dim(),
                                                                   cache.key_quantizer().block_size())),
      coded_values_(attention::kernels::can_accumulate_block_level_rows(cache.value_bits(), cache.value_dim(),
                                                                        cache.value_quantizer().block_size())) {
  if (byte_keys_) levels8_ = attention::kernels::byte_levels(cache.key_quantizer().levels().data(), cache.key_bits());
  if (integer_keys_) {
    integer_limit_ = attention::kernels::block_integer_limit(cache.key_quantizer().block_size());
    // Evenly spaced levels are scored from the codes themselves with the query doubled
    // (block_level_key_scores.h), which needs the smaller limit.
    if (cache.key_quantizer().even_levels() && cache.key_bits() <= 6) {
      integer_limit_ = std::min(integer_limit_, attention::kernels::kUniformQueryLimit);
    }
    // q8's keys: 4 codes per multiply-add instruction (vpdpbusd) instead of 2, the query split
    // into two bytes (q8's decode step at ctx 4096 went 0.71x -> 0.97x native in the microbench).
    even_byte_keys_ = cache.key_quantizer().even_levels() &&
                      attention::kernels::can_score_even_byte_rows(cache.key_bits(), cache.head_dim(),
                                                                   cache.key_quantizer().block_size());
    if (even_byte_keys_) integer_limit_ = attention::kernels::kEvenByteQueryLimit;
    levels16_ =
        attention::kernels::block_levels16(cache.key_quantizer().levels().data(), cache.key_bits(), integer_limit_);
  }
}

int64_t TurboQuantBlockRows::decoded_rows_end(bool codes_readable, int64_t n_queries, int64_t j0, int64_t j1) const {
  if (!codes_readable || n_queries > kMaxQueriesFromCodes) return j1;
  return std::min(j1, std::max(j0, cache_.sink_rows_held()));
}

int64_t TurboQuantBlockRows::rotated_offset() const {
  return integer_keys_ || byte_keys_ ? cache_.head_dim() / 2 + 1 : 0;
}

int64_t TurboQuantBlockRows::prepared_dim() const { return rotated_offset() + cache_.head_dim(); }

int64_t TurboQuantBlockRows::key_dim() const { return cache_.head_dim(); }
int64_t TurboQuantBlockRows::value_dim() const { return cache_.value_dim(); }

void TurboQuantBlockRows::prepare_query(const float* query, float* prepared) const {
  if (byte_keys_) {
    // Rounded to 8 bits once here; the int8 values and their magnitudes travel as the bytes of
    // the first d / 2 floats, then the step.
    const int64_t d = cache_.head_dim();
    float* rotated = prepared + rotated_offset();
    cache_.key_rotation().forward(query, rotated);
    auto* bytes = reinterpret_cast<uint8_t*>(prepared);
    attention::kernels::quantize_query_i8(rotated, d, reinterpret_cast<int8_t*>(bytes), bytes + d, prepared + d / 2);
    return;
  }
  if (!integer_keys_) {
    cache_.key_rotation().forward(query, prepared);
    return;
  }
  // Rounded to 16 bits once here, not once per tile; the driver copies prepared queries as
  // floats, so the int16 values travel as the bytes of the first d / 2 floats.
  const int64_t d = cache_.head_dim();
  float* rotated = prepared + d / 2 + 1;
  cache_.key_rotation().forward(query, rotated);
  thread_local std::vector<int16_t> q16;
  q16.resize(static_cast<std::size_t>(d));
  attention::kernels::quantize_query_i16(rotated, d, integer_limit_, q16.data(), prepared + d / 2);
  std::memcpy(prepared, q16.data(), static_cast<std::size_t>(d) * sizeof(int16_t));
}

void TurboQuantBlockRows::rotated_rows(bool keys, int64_t b, int64_t h, int64_t j0, int64_t j1, float* out,
                                       float* work) const {
  const int64_t dim = keys ? cache_.head_dim() : cache_.value_dim();
  const core::Rotation& rotation = keys ? cache_.key_rotation() : cache_.value_rotation();
  float* mu = work;           // Pi mu
  float* plain = work + dim;  // a sink row before rotation
  // Sink rows: exact f16 rows in the model's basis, rotated here.
  const int64_t sinks_end = std::min(j1, std::max(j0, cache_.sink_rows_held()));
  for (int64_t j = j0; j < sinks_end; ++j) {
    float* row = out + (j - j0) * dim;
    if (keys) {
      cache_.decode_key(b, h, j, plain, row);
    } else {
      cache_.decode_value(b, h, j, plain, row);
    }
    rotation.forward(plain, row);
  }
  // The coded rows lie contiguously: one tile decode per key-mean segment (values: one), the
  // rotated mean added in the same pass.
  const quant::BlockLloydQuantizer& quant = keys ? cache_.key_quantizer() : cache_.value_quantizer();
  const int d = static_cast<int>(dim);
  for (int64_t r0 = sinks_end; r0 < j1;) {
    const int64_t r1 = keys ? std::min(j1, cache_.key_segment_end(r0)) : j1;
    const bool has_mean = rotated_mean(keys ? cache_.key_mean(b, h, r0) : cache_.value_mean(b, h), dim, mu);
    quant.decode_rows(
        keys ? cache_.key_codes(b, h, r0) : cache_.value_codes(b, h, r0), static_cast<int64_t>(quant.code_bytes(d)),
        keys ? cache_.key_scales(b, h, r0) : cache_.value_scales(b, h, r0), static_cast<int64_t>(quant.blocks(d)),
        r1 - r0, d, has_mean ? mu : nullptr, out + (r0 - j0) * dim);
    r0 = r1;
  }
}

void TurboQuantBlockRows::rotated_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const {
  rotated_rows(true, b, h, j0, j1, out, work);
}

void TurboQuantBlockRows::rotated_values(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const {
  rotated_rows(false, b, h, j0, j1, out, work);
}

void TurboQuantBlockRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                     int64_t n_queries, float* scores, int64_t ld,
                                     attention::TileScratch& scratch) const {
  const int64_t d = cache_.head_dim(), pd = prepared_dim();
  const int64_t work = 2 * std::max(d, cache_.value_dim());
  // Sink rows (f16 copies) and, without integer keys or for many queries, every row: decoded and
  // scored in f32.
  const int64_t decoded_end = decoded_rows_end(integer_keys_ || permuted_keys_ || byte_keys_, n_queries, j0, j1);
  if (decoded_end > j0) {
    const int64_t n = decoded_end - j0;
    float* rows = scratch.f32(static_cast<std::size_t>(n * d + work));
    rotated_keys(b, h, j0, decoded_end, rows, rows + n * d);
    attention::kernels::score_rows(prepared + rotated_offset(), pd, n_queries, rows, d, n, d, scores, ld);
  }
  if (decoded_end < j1) {
    if (byte_keys_) {
      score_byte_keys(b, h, decoded_end, j1, prepared, n_queries, scores + (decoded_end - j0), ld, scratch);
    } else if (permuted_keys_) {
      score_permuted_keys(b, h, decoded_end, j1, prepared, n_queries, scores + (decoded_end - j0), ld);
    } else {
      score_integer_keys(b, h, decoded_end, j1, prepared, n_queries, scores + (decoded_end - j0), ld, scratch);
    }
  }
}

attention::kernels::BlockLevelKeys TurboQuantBlockRows::coded_keys(int64_t b, int64_t h, int64_t r0, int64_t r1) const {
  const quant::BlockLloydQuantizer& quant = cache_.key_quantizer();
  const auto d = static_cast<int>(cache_.head_dim());
  attention::kernels::BlockLevelKeys keys;
  keys.codes = cache_.key_codes(b, h, r0);
  keys.code_stride = static_cast<int64_t>(quant.code_bytes(d));
  keys.scales = cache_.key_scales(b, h, r0);
  keys.n_rows = r1 - r0;
  keys.dim = d;
  keys.bits = quant.bits();
  keys.block = quant.block_size();
  return keys;
}

void TurboQuantBlockRows::score_permuted_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                              int64_t n_queries, float* scores, int64_t ld) const {
  const int64_t d = cache_.head_dim(), pd = prepared_dim();
  const quant::BlockLloydQuantizer& quant = cache_.key_quantizer();
  float biases[kMaxQueriesFromCodes];  // decode tiles only (decoded_rows_end)
  for (int64_t r0 = j0; r0 < j1;) {
    const int64_t r1 = std::min(j1, cache_.key_segment_end(r0));
    // Smoothed keys hold k - mu: <q, k> = <q, k - mu> + <q, mu>, one bias per query and segment.
    const uint16_t* mu = cache_.key_mean(b, h, r0);
    if (mu != nullptr) {
      for (int64_t r = 0; r < n_queries; ++r) biases[r] = lm::kernels::simd::dot_f16(mu, prepared + r * pd, d);
    }
    const attention::kernels::BlockLevelKeys keys = coded_keys(b, h, r0, r1);
    attention::kernels::score_permuted_level_rows(keys, quant.levels().data(), prepared, pd,
                                                  mu != nullptr ? biases : nullptr, n_queries, scores + (r0 - j0), ld);
    r0 = r1;
  }
}

void TurboQuantBlockRows::score_byte_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                          int64_t n_queries, float* scores, int64_t ld,
                                          attention::TileScratch& scratch) const {
  const int64_t d = cache_.head_dim(), pd = prepared_dim();
  // The queries' int8 values side by side, then their magnitudes; their steps and biases.
  uint8_t* q8 = scratch.u8(static_cast<std::size_t>(2 * n_queries * d));
  uint8_t* abs_q8 = q8 + n_queries * d;
  float* steps = scratch.f32_second(static_cast<std::size_t>(2 * n_queries));
  float* biases = steps + n_queries;
  for (int64_t r = 0; r < n_queries; ++r) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(prepared + r * pd);
    std::memcpy(q8 + r * d, bytes, static_cast<std::size_t>(d));
    std::memcpy(abs_q8 + r * d, bytes + d, static_cast<std::size_t>(d));
    steps[r] = prepared[r * pd + d / 2];
  }
  for (int64_t r0 = j0; r0 < j1;) {
    const int64_t r1 = std::min(j1, cache_.key_segment_end(r0));
    // Smoothed keys hold k - mu: one bias <q, mu> per query and key-mean segment.
    const uint16_t* mu = cache_.key_mean(b, h, r0);
    if (mu != nullptr) {
      for (int64_t r = 0; r < n_queries; ++r)
        biases[r] = lm::kernels::simd::dot_f16(mu, prepared + r * pd + rotated_offset(), d);
    }
    const attention::kernels::BlockLevelKeys keys = coded_keys(b, h, r0, r1);
    attention::kernels::score_byte_level_rows(keys, levels8_, reinterpret_cast<const int8_t*>(q8), abs_q8, steps,
                                              mu != nullptr ? biases : nullptr, n_queries, scores + (r0 - j0), ld);
    r0 = r1;
  }
}

void TurboQuantBlockRows::score_integer_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                             int64_t n_queries, float* scores, int64_t ld,
                                             attention::TileScratch& scratch) const {
  const int64_t d = cache_.head_dim(), pd = prepared_dim();
  // The queries' int16 values side by side, then their steps and biases.
  auto* q16 = reinterpret_cast<int16_t*>(scratch.u8(static_cast<std::size_t>(n_queries * d) * sizeof(int16_t)));
  float* steps = scratch.f32_second(static_cast<std::size_t>(2 * n_queries));
  float* biases = steps + n_queries;
  for (int64_t r = 0; r < n_queries; ++r) {
    std::memcpy(q16 + r * d, prepared + r * pd, static_cast<std::size_t>(d) * sizeof(int16_t));
    steps[r] = prepared[r * pd + d / 2];
  }
  // Smoothed keys hold k - mu: <q, k> = <q, k - mu> + <q, mu>, one f32 bias per query and
  // key-mean segment, the f16 mean read as it is stored (SIMD: per tile this dot product cost
  // about as much as scoring 10 rows when it ran element by element).
  for (int64_t r0 = j0; r0 < j1;) {
    const int64_t r1 = std::min(j1, cache_.key_segment_end(r0));
    const uint16_t* mu = cache_.key_mean(b, h, r0);
    const bool has_mean = mu != nullptr;
    if (has_mean) {
      for (int64_t r = 0; r < n_queries; ++r)
        biases[r] = lm::kernels::simd::dot_f16(mu, prepared + r * pd + d / 2 + 1, d);
    }
    const attention::kernels::BlockLevelKeys keys = coded_keys(b, h, r0, r1);
    if (even_byte_keys_) {
      attention::kernels::score_even_byte_rows(keys, q16, steps, has_mean ? biases : nullptr, n_queries,
                                               scores + (r0 - j0), ld);
    } else {
      attention::kernels::score_block_level_rows(keys, levels16_, q16, steps, has_mean ? biases : nullptr, n_queries,
                                                 scores + (r0 - j0), ld);
    }
    r0 = r1;
  }
}

void TurboQuantBlockRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                          int64_t n_queries, int64_t ld, float* acc,
                                          attention::TileScratch& scratch) const {
  const int64_t dv = cache_.value_dim();
  const int64_t work = 2 * std::max(cache_.head_dim(), dv);
  // Sink rows (f16 copies) and, without coded values or for many queries, every row: decoded and
  // accumulated in f32.
  const int64_t decoded_end = decoded_rows_end(coded_values_, n_queries, j0, j1);
  if (decoded_end > j0) {
    const int64_t n = decoded_end - j0;
    float* rows = scratch.f32(static_cast<std::size_t>(n * dv + work));
    rotated_values(b, h, j0, decoded_end, rows, rows + n * dv);
    attention::kernels::accumulate_rows(weights, ld, n_queries, rows, dv, n, dv, acc, dv);
  }
  if (decoded_end < j1) {
    accumulate_coded_values(b, h, decoded_end, j1, weights + (decoded_end - j0), n_queries, ld, acc, scratch);
  }
}

void TurboQuantBlockRows::accumulate_coded_values(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                                  int64_t n_queries, int64_t ld, float* acc,
                                                  attention::TileScratch& scratch) const {
  const int64_t dv = cache_.value_dim(), n = j1 - j0;
  const quant::BlockLloydQuantizer& quant = cache_.value_quantizer();
  attention::kernels::BlockLevelValues values;
  values.codes = cache_.value_codes(b, h, j0);
  values.code_stride = static_cast<int64_t>(quant.code_bytes(static_cast<int>(dv)));
  values.scales = cache_.value_scales(b, h, j0);
  values.n_rows = n;
  values.dim = dv;
  values.bits = quant.bits();
  values.block = quant.block_size();
  values.levels_f16 = quant.levels_f16().data();
  values.even_levels = quant.even_levels();
  // Smoothed values hold v - mu: sum_j w_j v_j = sum_j w_j (v_j - mu) + (sum_j w_j) mu, the
  // kernel adding the second term once per tile.
  float* mu = scratch.f32_second(static_cast<std::size_t>(dv));
  if (rotated_mean(cache_.value_mean(b, h), dv, mu)) values.offset = mu;
  attention::kernels::accumulate_block_level_rows(values, weights, ld, n_queries, acc, dv);
}

void TurboQuantBlockRows::finish_row(float* row) const {
  // Rotation::inverse accepts the same buffer for input and output.
  cache_.value_rotation().inverse(row, row);
}

}  // namespace veloxquant
