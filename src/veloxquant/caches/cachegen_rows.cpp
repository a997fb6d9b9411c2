#include "veloxquant/caches/cachegen_rows.h"

#include <algorithm>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/caches/cachegen_cache.h"

namespace veloxquant {

CachegenRows::CachegenRows(const CachegenCache& cache)
    : cache_(cache),
      tail_keys_(attention::PlainRows::of(cache.tail_k_)),
      tail_values_(attention::PlainRows::of(cache.tail_v_)) {}

int64_t CachegenRows::key_dim() const { return cache_.dk_; }
int64_t CachegenRows::value_dim() const { return cache_.dv_; }
int64_t CachegenRows::rows(int64_t, int64_t) const { return cache_.offset_; }

void CachegenRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                              float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t group = cache_.group_, d = cache_.dk_, frontier = cache_.frontier_, pd = prepared_dim();
  const int64_t quantized_end = std::min(j1, frontier);
  for (int64_t a = j0; a < quantized_end;) {
    const int64_t block = a / group, end = std::min(quantized_end, (block + 1) * group);
    float* rows = scratch.f32(static_cast<std::size_t>(group * d));
    cache_.decode_record(block, b, h, 0, rows);
    lm::kernels::tiles::score_rows(prepared, pd, n_queries, rows + (a - block * group) * d, d, end - a, d,
                                   scores + (a - j0), ld);
    a = end;
  }
  if (j1 > frontier) {  // the tail's keys, rows from the frontier on in their own buffer
    const int64_t t0 = std::max(j0, frontier);
    attention::score_plain_tile(tail_keys_, b, h, t0 - frontier, j1 - frontier, prepared, n_queries, scores + (t0 - j0),
                                ld, scratch);
  }
}

void CachegenRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                   int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t group = cache_.group_, d = cache_.dv_, frontier = cache_.frontier_;
  const int64_t quantized_end = std::min(j1, frontier);
  for (int64_t a = j0; a < quantized_end;) {
    const int64_t block = a / group, end = std::min(quantized_end, (block + 1) * group);
    float* rows = scratch.f32(static_cast<std::size_t>(group * d));
    cache_.decode_record(block, b, h, 1, rows);
    lm::kernels::tiles::accumulate_rows(weights + (a - j0), ld, n_queries, rows + (a - block * group) * d, d, end - a,
                                        d, acc, d);
    a = end;
  }
  if (j1 > frontier) {
    const int64_t t0 = std::max(j0, frontier);
    attention::accumulate_plain_tile(tail_values_, b, h, t0 - frontier, j1 - frontier, weights + (t0 - j0), n_queries,
                                     ld, acc, scratch);
  }
}

}  // namespace veloxquant
