#include "veloxquant/caches/turboquant_block_split_rows.h"

#include <algorithm>
#include <array>

#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/block_level_value_sums.h"
#include "veloxquant/attention/split_level_key_scores.h"
#include "veloxquant/attention/split_level_rows.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/turboquant_block_cache.h"
#include "veloxquant/quant/log8_scale.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {
namespace {

// Queries per tile up to which rows are read from their codes (as turboquant_block_rows.cpp):
// more queries share one decode of the tile instead.
constexpr int64_t kMaxQueriesFromCodes = 4;

}  // namespace

TurboQuantBlockSplitRows::TurboQuantBlockSplitRows(const TurboQuantBlockCache& cache, int64_t rows)
    : cache_(cache),
      rows_(rows),
      coded_values_(attention::kernels::can_accumulate_block_level_rows(cache.value_bits(), cache.value_dim(),
                                                                        cache.value_quantizer().block_size())) {
  // The coded keys' layout, the same for every tile (score_tile fills in the rows).
  const SplitKeyCoder& split = *cache.split();
  keys_layout_.code_stride = split.code_bytes();
  keys_layout_.scale_stride = split.groups();
  keys_layout_.n_groups = split.groups();
  for (int g = 0; g < split.groups(); ++g) {
    keys_layout_.channels[g] = split.group(g).channels;
    keys_layout_.bits[g] = split.group(g).bits;
    keys_layout_.offset[g] = split.offset(g);
    keys_layout_.code_offset[g] = split.code_offset(g);
    keys_layout_.levels[g] = split.quantizer(g).levels().data();
  }
  keys_layout_.scale_table = quant::log8_scale_table();
  // log8 value blocks are the same layout with one group per block (at most 4 blocks of a
  // multiple of 8 coordinates at <= 4 bits: q3's 64 at 3 bits is one); other shapes decode
  // row by row.
  const quant::BlockLloydQuantizer& vq = cache.value_quantizer();
  const int dv = static_cast<int>(cache.value_dim()), block = vq.block_size();
  if (cache.log8_scales() && dv % block == 0 && dv / block <= attention::kernels::SplitLevelKeys::kMaxGroups) {
    values_layout_.code_stride = static_cast<int64_t>(vq.code_bytes(dv));
    values_layout_.scale_stride = static_cast<int64_t>(vq.blocks(dv));
    values_layout_.n_groups = dv / block;
    for (int g = 0; g < values_layout_.n_groups; ++g) {
      values_layout_.channels[g] = block;
      values_layout_.bits[g] = vq.bits();
      values_layout_.offset[g] = g * block;
      values_layout_.code_offset[g] = g * block * vq.bits() / 8;
      values_layout_.levels[g] = vq.levels().data();
    }
    values_layout_.scale_table = quant::log8_scale_table();
    tile_values_ = attention::kernels::valid_split_level_rows(values_layout_);
  }
}

int64_t TurboQuantBlockSplitRows::key_dim() const { return cache_.head_dim(); }
int64_t TurboQuantBlockSplitRows::value_dim() const { return cache_.value_dim(); }
int64_t TurboQuantBlockSplitRows::prepared_dim() const { return cache_.batch() * cache_.heads() * cache_.head_dim(); }

void TurboQuantBlockSplitRows::prepare_query(const float* query, float* prepared) const {
  const int64_t d = cache_.head_dim();
  for (int64_t bh = 0; bh < cache_.batch() * cache_.heads(); ++bh) {
    cache_.split()->forward(cache_.key_permutation(bh / cache_.heads(), bh % cache_.heads()), query, prepared + bh * d);
  }
}

int64_t TurboQuantBlockSplitRows::coded_start(int64_t n_queries, int64_t j0, int64_t j1) const {
  if (n_queries > kMaxQueriesFromCodes) return j1;
  return std::min(j1, std::max(j0, cache_.sink_rows_held()));
}

void TurboQuantBlockSplitRows::transformed_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out) const {
  const int64_t d = cache_.head_dim();
  std::array<float, 2048> plain;  // a sink row and its scratch; d <= 1024 (checked by the cache), no allocation
  int64_t j = j0;
  for (; j < std::min(j1, cache_.sink_rows_held()); ++j) {
    cache_.decode_key(b, h, j, plain.data(), plain.data() + d);
    cache_.split()->forward(cache_.key_permutation(b, h), plain.data(), out + (j - j0) * d);
  }
  // The coded rows a segment (one key mean) at a time, decoded by the tile kernel with the mean
  // widened once per segment as its offset: the same floats as SplitKeyCoder::decode row by row
  // with the mean added after (split_level_rows.h), which was ~40% of q3's prefill.
  std::array<float, 1024> mean;
  attention::kernels::SplitLevelKeys keys = keys_layout_;
  while (j < j1) {
    const int64_t r1 = std::min(j1, cache_.key_segment_end(j));
    const uint16_t* mu = cache_.key_mean(b, h, j);
    if (mu != nullptr) lm::kernels::simd::f16_to_f32(mu, mean.data(), d);
    keys.codes = cache_.key_codes(b, h, j);
    keys.scales = cache_.key_scale_codes(b, h, j);
    keys.n_rows = r1 - j;
    attention::kernels::decode_split_level_rows(keys, mu != nullptr ? mean.data() : nullptr, out + (j - j0) * d);
    j = r1;
  }
}

void TurboQuantBlockSplitRows::transformed_values(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out) const {
  const int64_t dv = cache_.value_dim();
  std::array<float, 2048> plain;  // dv <= 1024 with log8 scales (checked by the cache)
  std::array<float, 1024> mean;   // the f16 mean widened once per call
  const uint16_t* mu = cache_.value_mean(b, h);
  if (mu != nullptr) lm::kernels::simd::f16_to_f32(mu, mean.data(), dv);
  int64_t j = j0;
  for (; j < j1 && j < cache_.sink_rows_held(); ++j) {
    cache_.decode_value(b, h, j, plain.data(), plain.data() + dv);
    cache_.value_rotation().forward(plain.data(), out + (j - j0) * dv);
  }
  if (j < j1 && tile_values_) {
    // All coded rows in one call (the same floats as decode_rotated_value + the mean).
    attention::kernels::SplitLevelKeys values = values_layout_;
    values.codes = cache_.value_codes(b, h, j);
    values.scales = cache_.value_scale_codes(b, h, j);
    values.n_rows = j1 - j;
    attention::kernels::decode_split_level_rows(values, mu != nullptr ? mean.data() : nullptr, out + (j - j0) * dv);
    return;
  }
  for (; j < j1; ++j) {
    float* row = out + (j - j0) * dv;
    cache_.decode_rotated_value(b, h, j, row);
    if (mu != nullptr) {
      for (int64_t e = 0; e < dv; ++e) row[e] += mean[static_cast<std::size_t>(e)];
    }
  }
}

void TurboQuantBlockSplitRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                          int64_t n_queries, float* scores, int64_t ld,
                                          attention::TileScratch& scratch) const {
  const int64_t d = cache_.head_dim(), pd = prepared_dim();
  const float* q = prepared + (b * cache_.heads() + h) * d;  // this head's basis
  const int64_t coded = coded_start(n_queries, j0, j1);
  if (coded > j0) {
    const int64_t n = coded - j0;
    float* rows = scratch.f32(static_cast<std::size_t>(n * d));
    transformed_keys(b, h, j0, coded, rows);
    attention::kernels::score_rows(q, pd, n_queries, rows, d, n, d, scores, ld);
  }
  if (coded >= j1) return;
  attention::kernels::SplitLevelKeys keys = keys_layout_;
  float biases[kMaxQueriesFromCodes];
  for (int64_t r0 = coded; r0 < j1;) {
    const int64_t r1 = std::min(j1, cache_.key_segment_end(r0));
    // Keys hold k - mu: <q, k> = <q, k - mu> + <q, mu>, one bias per query and segment.
    const uint16_t* mu = cache_.key_mean(b, h, r0);
    if (mu != nullptr) {
      for (int64_t r = 0; r < n_queries; ++r) biases[r] = lm::kernels::simd::dot_f16(mu, q + r * pd, d);
    }
    keys.codes = cache_.key_codes(b, h, r0);
    keys.scales = cache_.key_scale_codes(b, h, r0);
    keys.n_rows = r1 - r0;
    attention::kernels::score_split_level_rows(keys, q, pd, mu != nullptr ? biases : nullptr, n_queries,
                                               scores + (r0 - j0), ld);
    r0 = r1;
  }
}

void TurboQuantBlockSplitRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                               int64_t n_queries, int64_t ld, float* acc,
                                               attention::TileScratch& scratch) const {
  const int64_t dv = cache_.value_dim();
  const int64_t coded = coded_values_ ? coded_start(n_queries, j0, j1) : j1;
  if (coded > j0) {
    const int64_t n = coded - j0;
    float* rows = scratch.f32(static_cast<std::size_t>(n * dv));
    transformed_values(b, h, j0, coded, rows);
    attention::kernels::accumulate_rows(weights, ld, n_queries, rows, dv, n, dv, acc, dv);
  }
  if (coded >= j1) return;
  const int64_t n = j1 - coded;
  const quant::BlockLloydQuantizer& quant = cache_.value_quantizer();
  const auto blocks = static_cast<int64_t>(quant.blocks(static_cast<int>(dv)));
  // The tile's log8 scales as the f16 values they stand for (exact: quant/log8_scale.h).
  auto* scales = reinterpret_cast<uint16_t*>(scratch.u8(static_cast<std::size_t>(n * blocks) * sizeof(uint16_t)));
  const uint8_t* scale_codes = cache_.value_scale_codes(b, h, coded);
  const uint16_t* f16 = quant::log8_scale_f16_table();
  for (int64_t i = 0; i < n * blocks; ++i) scales[i] = f16[scale_codes[i]];
  attention::kernels::BlockLevelValues values;
  values.codes = cache_.value_codes(b, h, coded);
  values.code_stride = static_cast<int64_t>(quant.code_bytes(static_cast<int>(dv)));
  values.scales = scales;
  values.n_rows = n;
  values.dim = dv;
  values.bits = quant.bits();
  values.block = quant.block_size();
  values.levels_f16 = quant.levels_f16().data();
  values.even_levels = quant.even_levels();
  float* mu = scratch.f32_second(static_cast<std::size_t>(dv));
  if (const uint16_t* m = cache_.value_mean(b, h)) {
    cache_rows::load_f32(reinterpret_cast<const std::byte*>(m), lm::DType::F16, static_cast<std::size_t>(dv), mu);
    values.offset = mu;
  }
  attention::kernels::accumulate_block_level_rows(values, weights + (coded - j0), ld, n_queries, acc, dv);
}

void TurboQuantBlockSplitRows::finish_row(float* row) const { cache_.value_rotation().inverse(row, row); }

}  // namespace veloxquant
