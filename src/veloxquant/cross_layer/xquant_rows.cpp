#include "veloxquant/cross_layer/xquant_rows.h"

#include <algorithm>

#include "veloxquant/attention/float_key_scores.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/cross_layer/xquant_cache.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;
namespace kernels = attention::kernels;

XQuantCodeOrders::XQuantCodeOrders(int base_bits, int residual_bits, int64_t key_dim, int64_t value_dim)
    : base_keys(base_bits, key_dim),
      base_values(base_bits, value_dim),
      // A layer without a residual never reads these; one bit keeps them valid orders.
      residual_keys(std::max(residual_bits, 1), key_dim),
      residual_values(std::max(residual_bits, 1), value_dim) {}

namespace {

// Keys of planar widths are scored with the query folded in f32 (attention/float_key_scores.h),
// which sums the same products as the fetched rows, only reassociated; other widths come from an
// f32 tile of the run's codes. The 16-bit integer fold that KIVI's 2-bit keys take
// (integer_key_scores.h) measured slower here (attention/xquant_b2/4096, one thread, three
// alternating rounds: x_native 0.62-0.67 against 0.71-0.74), since a run is one token group of 32
// rows and the fold is paid per run, and it would add the query's rounding (up to 4e-4 on the
// fused test's outputs).
bool keys_from_planes(const attention::CodeOrder& order) {
  return order.planar() && kernels::can_score_codes_f32(order.bits(), order.size() * order.bits() / 8);
}

bool values_from_planes(const attention::CodeOrder& order) {
  return order.planar() && kernels::can_accumulate_planes(order.bits(), order.size() * order.bits() / 8, order.size());
}

// Per-thread scratch of a tile's key scoring (carved from the driver's floats): the group's
// scales and mins in code order [d each], folded queries [n_queries, d], their biases
// [n_queries], a tile of codes [kTileRows, d] (tile path).
struct KeyScratch {
  float *scale, *min, *folded, *bias, *tile;
};

// out[r * out_ld + j] = <query r, row j> over the n rows of one code set, the queries in its
// code order.
void score_run(const XQuantRows::CodeSet& set, int64_t n, int64_t d, const float* queries, int64_t n_queries,
               float* out, int64_t out_ld, const KeyScratch& s) {
  const attention::CodeOrder& order = *set.order;
  const int bits = order.bits();
  kernels::gather_pairs(set.pairs, order.natural_indices().data(), d, s.scale, s.min);
  kernels::fold_scales(queries, n_queries, d, s.scale, s.min, s.folded, s.bias);
  if (keys_from_planes(order)) {
    kernels::score_codes_f32(reinterpret_cast<const uint8_t*>(set.first_row), set.row_words * 4, n, d * bits / 8, bits,
                             s.folded, s.bias, n_queries, out, out_ld);
    return;
  }
  order.unpack_rows(set.first_row, set.row_words, n, s.tile);
  kernels::score_rows(s.folded, d, n_queries, s.tile, d, n, d, out, out_ld);
  for (int64_t r = 0; r < n_queries; ++r) {
    for (int64_t j = 0; j < n; ++j) out[r * out_ld + j] += s.bias[r];
  }
}

// Per-thread scratch of a tile's value accumulation: one run's weighted code sums
// [n_queries, d], the group's scales and mins in code order [d each], a tile of codes
// [kTileRows, d] (tile path).
struct ValueScratch {
  float *sums, *scale, *min, *tile;
};

// out[r, e] (the set's code order) += sum_j w_rj value_j(e) over the n rows of one code set:
// s_e * sum_j w_rj code_j(e) + m_e * sum_j w_rj, the run's weights back to back [n_queries, n]
// and their sums given.
void accumulate_run(const XQuantRows::CodeSet& set, int64_t n, int64_t d, const float* run_weights,
                    const float* weight_sums, int64_t n_queries, float* out, const ValueScratch& s) {
  const attention::CodeOrder& order = *set.order;
  const int bits = order.bits();
  std::fill(s.sums, s.sums + n_queries * d, 0.0f);
  if (values_from_planes(order)) {
    kernels::accumulate_planes(
        {reinterpret_cast<const uint8_t*>(set.first_row), set.row_words * 4, n, d * bits / 8, bits, d},
        {run_weights, nullptr, n_queries, s.sums, d});
  } else {
    order.unpack_rows(set.first_row, set.row_words, n, s.tile);
    kernels::accumulate_rows(run_weights, n, n_queries, s.tile, d, n, d, s.sums, d);
  }
  kernels::gather_pairs(set.pairs, order.natural_indices().data(), d, s.scale, s.min);
  for (int64_t r = 0; r < n_queries; ++r) {
    const float total = weight_sums[r];
    for (int64_t e = 0; e < d; ++e) out[r * d + e] += s.scale[e] * s.sums[r * d + e] + s.min[e] * total;
  }
}

}  // namespace

XQuantRows::XQuantRows(const XQuantCache& cache)
    : cache_(cache),
      tail_keys_(attention::PlainRows::of(cache.tail_k_)),
      tail_values_(attention::PlainRows::of(cache.tail_v_)) {}

int64_t XQuantRows::key_dim() const { return cache_.dk_; }
int64_t XQuantRows::value_dim() const { return cache_.dv_; }
int64_t XQuantRows::rows(int64_t, int64_t) const { return cache_.offset_; }

int XQuantRows::code_sets(int64_t b, int64_t h, int64_t a, int64_t* end, bool keys, CodeSet sets[2]) const {
  // Blocks are in token order and tile the quantized rows: the first one that ends past `a`.
  const auto& blocks = cache_.blocks_;
  const auto block = std::upper_bound(blocks.begin(), blocks.end(), a, [](int64_t row, const XQuantCache::Block& blk) {
    return row < blk.token_start + blk.rows;
  });
  // Blocks start on token-group boundaries (groups are aligned to absolute positions).
  const int64_t group = cache_.group_, row = a - block->token_start, g = row / group;
  *end = std::min({*end, block->token_start + block->rows, block->token_start + (g + 1) * group});
  const XQuantCodeOrders& orders = *cache_.orders_;
  const lm::Tensor& codes = keys ? block->codes->key_codes : block->codes->value_codes;
  sets[0] = {row_ptr<uint32_t>(codes, b, h, row), codes.strides()[2],
             row_ptr<float>(keys ? block->key_params : block->value_params, b, h, g),
             keys ? &orders.base_keys : &orders.base_values};
  if (!cache_.has_residual()) return 1;
  const lm::Tensor& residual = keys ? block->key_residual_codes : block->value_residual_codes;
  sets[1] = {row_ptr<uint32_t>(residual, b, h, row), residual.strides()[2],
             row_ptr<float>(keys ? block->key_residual_params : block->value_residual_params, b, h, g),
             keys ? &orders.residual_keys : &orders.residual_values};
  return 2;
}

void XQuantRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                            float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = cache_.dk_, quantized_end = std::min(j1, cache_.frontier_);
  if (j0 < quantized_end) {
    const int n_sets = cache_.has_residual() ? 2 : 1;
    const int64_t nq_d = n_queries * d;
    // Scratch: the queries in each set's code order [n_sets][n_queries, d], the residual's scores
    // [n_queries, kTileRows], then KeyScratch.
    float* ordered = scratch.f32(static_cast<std::size_t>(n_sets * nq_d + 2 * d + nq_d + n_queries +
                                                          n_queries * attention::kTileRows + attention::kTileRows * d));
    float* residual_scores = ordered + n_sets * nq_d;
    KeyScratch key_scratch{};
    key_scratch.scale = residual_scores + n_queries * attention::kTileRows;
    key_scratch.min = key_scratch.scale + d;
    key_scratch.folded = key_scratch.min + d;
    key_scratch.bias = key_scratch.folded + nq_d;
    key_scratch.tile = key_scratch.bias + n_queries;
    const XQuantCodeOrders& orders = *cache_.orders_;
    for (int64_t r = 0; r < n_queries; ++r) {
      orders.base_keys.permute(prepared + r * d, ordered + r * d);
      if (n_sets == 2) orders.residual_keys.permute(prepared + r * d, ordered + nq_d + r * d);
    }
    CodeSet sets[2];
    for (int64_t a = j0; a < quantized_end;) {
      int64_t end = quantized_end;
      code_sets(b, h, a, &end, true, sets);
      const int64_t n = end - a;
      // The anchor's codes write the run's scores; the residual's add to them.
      score_run(sets[0], n, d, ordered, n_queries, scores + (a - j0), ld, key_scratch);
      if (n_sets == 2) {
        score_run(sets[1], n, d, ordered + nq_d, n_queries, residual_scores, n, key_scratch);
        for (int64_t r = 0; r < n_queries; ++r) {
          float* row = scores + r * ld + (a - j0);
          for (int64_t j = 0; j < n; ++j) row[j] += residual_scores[r * n + j];
        }
      }
      a = end;
    }
  }
  if (j1 > cache_.frontier_) {  // the tail's keys, rows from the frontier on in their own buffer
    const int64_t t0 = std::max(j0, cache_.frontier_);
    attention::score_plain_tile(tail_keys_, b, h, t0 - cache_.frontier_, j1 - cache_.frontier_, prepared, n_queries,
                                scores + (t0 - j0), ld, scratch);
  }
}

void XQuantRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                 int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t d = cache_.dv_, quantized_end = std::min(j1, cache_.frontier_);
  if (j0 < quantized_end) {
    const int n_sets = cache_.has_residual() ? 2 : 1;
    const int64_t nq_d = n_queries * d;
    // Scratch: an accumulator per set in its code order [n_sets][n_queries, d], the run's weights
    // back to back [n_queries, kTileRows] and their sums [n_queries], then ValueScratch.
    float* ordered = scratch.f32(static_cast<std::size_t>(n_sets * nq_d + nq_d + n_queries * attention::kTileRows +
                                                          n_queries + 2 * d + attention::kTileRows * d));
    float* run_weights = ordered + n_sets * nq_d;
    float* weight_sums = run_weights + n_queries * attention::kTileRows;
    ValueScratch value_scratch{};
    value_scratch.sums = weight_sums + n_queries;
    value_scratch.scale = value_scratch.sums + nq_d;
    value_scratch.min = value_scratch.scale + d;
    value_scratch.tile = value_scratch.min + d;
    std::fill(ordered, ordered + n_sets * nq_d, 0.0f);
    CodeSet sets[2];
    for (int64_t a = j0; a < quantized_end;) {
      int64_t end = quantized_end;
      const int n_run_sets = code_sets(b, h, a, &end, false, sets);
      const int64_t n = end - a;
      for (int64_t r = 0; r < n_queries; ++r) {
        const float* w = weights + r * ld + (a - j0);
        float total = 0.0f;
        for (int64_t j = 0; j < n; ++j) total += w[j];
        std::copy_n(w, n, run_weights + r * n);
        weight_sums[r] = total;
      }
      for (int s = 0; s < n_run_sets; ++s) {
        accumulate_run(sets[s], n, d, run_weights, weight_sums, n_queries, ordered + s * nq_d, value_scratch);
      }
      a = end;
    }
    const XQuantCodeOrders& orders = *cache_.orders_;
    for (int64_t r = 0; r < n_queries; ++r) {
      orders.base_values.add_to_natural(ordered + r * d, acc + r * d);
      if (n_sets == 2) orders.residual_values.add_to_natural(ordered + nq_d + r * d, acc + r * d);
    }
  }
  if (j1 > cache_.frontier_) {
    const int64_t t0 = std::max(j0, cache_.frontier_);
    attention::accumulate_plain_tile(tail_values_, b, h, t0 - cache_.frontier_, j1 - cache_.frontier_,
                                     {weights + (t0 - j0), n_queries, ld}, acc, scratch);
  }
}

}  // namespace veloxquant
