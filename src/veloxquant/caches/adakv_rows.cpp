#include "veloxquant/caches/adakv_rows.h"

#include <algorithm>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/caches/adakv_cache.h"

namespace veloxquant {

AdaKVRows::AdaKVRows(const AdaKVCache& cache)
    : cache_(cache), tail_k_(attention::PlainRows::of(cache.tail_k_)), tail_v_(attention::PlainRows::of(cache.tail_v_)) {}

int64_t AdaKVRows::key_dim() const { return cache_.dk_; }
int64_t AdaKVRows::value_dim() const { return cache_.dv_; }
int64_t AdaKVRows::rows(int64_t, int64_t) const { return cache_.offset_; }

void AdaKVRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                           float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = cache_.dk_, frontier = cache_.frontier_, group = cache_.group_;
  const int64_t quantized_end = std::min(j1, frontier);
  if (j0 < quantized_end) {
    // The tile's quantized rows decoded block by block (each block has its own width), then
    // scored for every query at once. Grow-only per-thread buffer: the driver's scratch serves
    // the tail's plain rows below.
    thread_local std::vector<float> tile;
    tile.resize(static_cast<std::size_t>((quantized_end - j0) * d));
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t end = std::min(quantized_end, (a / group + 1) * group);
      cache_.decode_keys(b, h, a, end, tile.data() + (a - j0) * d);
      a = end;
    }
    lm::kernels::tiles::score_rows(prepared, prepared_dim(), n_queries, tile.data(), d, quantized_end - j0, d, scores,
                                   ld);
  }
  if (j1 > frontier) {
    const int64_t t0 = std::max(j0, frontier);
    attention::score_plain_tile(tail_k_, b, h, t0 - frontier, j1 - frontier, prepared, n_queries, scores + (t0 - j0), ld,
                                scratch);
  }
}

void AdaKVRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                                int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t d = cache_.dv_, frontier = cache_.frontier_, group = cache_.group_;
  const int64_t quantized_end = std::min(j1, frontier);
  if (j0 < quantized_end) {
    thread_local std::vector<float> tile;
    tile.resize(static_cast<std::size_t>((quantized_end - j0) * d));
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t end = std::min(quantized_end, (a / group + 1) * group);
      cache_.decode_values(b, h, a, end, tile.data() + (a - j0) * d);
      a = end;
    }
    lm::kernels::tiles::accumulate_rows(weights, ld, n_queries, tile.data(), d, quantized_end - j0, d, acc, d);
  }
  if (j1 > frontier) {
    const int64_t t0 = std::max(j0, frontier);
    attention::accumulate_plain_tile(tail_v_, b, h, t0 - frontier, j1 - frontier, weights + (t0 - j0), n_queries, ld, acc,
                                     scratch);
  }
}

}  // namespace veloxquant
