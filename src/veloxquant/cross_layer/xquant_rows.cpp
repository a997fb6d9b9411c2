#include "veloxquant/cross_layer/xquant_rows.h"

#include <algorithm>

#include "lm/kernels/attention_tiles.h"
#include "lm/tensor.h"
#include "veloxquant/cross_layer/xquant_cache.h"

namespace veloxquant {

XQuantRows::XQuantRows(const XQuantCache& cache)
    : cache_(cache),
      tail_keys_(attention::PlainRows::of(cache.tail_k_)),
      tail_values_(attention::PlainRows::of(cache.tail_v_)) {}

int64_t XQuantRows::key_dim() const { return cache_.dk_; }
int64_t XQuantRows::value_dim() const { return cache_.dv_; }
int64_t XQuantRows::rows(int64_t, int64_t) const { return cache_.offset_; }

template <class Run>
void XQuantRows::for_decoded_runs(int64_t b, int64_t h, int64_t j0, int64_t j1, bool keys,
                                  attention::TileScratch& scratch, const Run& run) const {
  const int64_t d = keys ? cache_.dk_ : cache_.dv_;
  const int64_t quantized_end = std::min(j1, cache_.frontier_);
  if (j0 >= quantized_end) return;
  const std::size_t n = static_cast<std::size_t>((quantized_end - j0) * d);
  float* rows = scratch.f32(n);
  float* residual = scratch.f32_second(n);
  // Codes, then (once a run is decoded) its rows in the cache's dtype: room for both uses.
  uint8_t* bytes = scratch.u8(n * sizeof(float));
  const lm::DType dtype = cache_.dtype_;
  // Blocks are in token order and tile the quantized rows; the first one that ends past j0.
  const auto& blocks = cache_.blocks_;
  auto block = std::upper_bound(blocks.begin(), blocks.end(), j0, [](int64_t row, const XQuantCache::Block& blk) {
    return row < blk.token_start + blk.rows;
  });
  for (int64_t a = j0; a < quantized_end; ++block) {
    const int64_t end = std::min(quantized_end, block->token_start + block->rows);
    // (Split-K may start a run anywhere: decode_rows takes each row's own token group.)
    cache_.decode_rows(*block, b, h, keys, a - block->token_start, end - a, rows, bytes, residual);
    if (dtype != lm::DType::F32) {
      // The values update_and_fetch returns: decoded rows rounded to the cache's dtype (the
      // model's KV dtype, f16 by default), so both paths attend over the same values and differ
      // only in summation order.
      const std::size_t count = static_cast<std::size_t>((end - a) * d);
      auto* raw = reinterpret_cast<std::byte*>(rows);
      lm::convert_elements(raw, lm::DType::F32, reinterpret_cast<std::byte*>(bytes), dtype, count);
      lm::convert_elements(reinterpret_cast<const std::byte*>(bytes), dtype, raw, lm::DType::F32, count);
    }
    run(a, end - a, rows);
    a = end;
  }
}

void XQuantRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                            float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = cache_.dk_, pd = prepared_dim(), frontier = cache_.frontier_;
  for_decoded_runs(b, h, j0, j1, true, scratch, [&](int64_t a, int64_t n, const float* rows) {
    lm::kernels::tiles::score_rows(prepared, pd, n_queries, rows, d, n, d, scores + (a - j0), ld);
  });
  if (j1 > frontier) {  // the tail's keys, rows from the frontier on in their own buffer
    const int64_t t0 = std::max(j0, frontier);
    attention::score_plain_tile(tail_keys_, b, h, t0 - frontier, j1 - frontier, prepared, n_queries, scores + (t0 - j0),
                                ld, scratch);
  }
}

void XQuantRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                 int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t d = cache_.dv_, frontier = cache_.frontier_;
  for_decoded_runs(b, h, j0, j1, false, scratch, [&](int64_t a, int64_t n, const float* rows) {
    lm::kernels::tiles::accumulate_rows(weights + (a - j0), ld, n_queries, rows, d, n, d, acc, d);
  });
  if (j1 > frontier) {
    const int64_t t0 = std::max(j0, frontier);
    attention::accumulate_plain_tile(tail_values_, b, h, t0 - frontier, j1 - frontier, weights + (t0 - j0), n_queries,
                                     ld, acc, scratch);
  }
}

}  // namespace veloxquant
