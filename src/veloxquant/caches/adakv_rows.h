#pragma once
// adakv's storage (caches/adakv_cache.h) as one RowSource for the attention driver. The widths
// change from block to block and head to head, so instead of folding queries into one code
// layout the quantized rows of a tile are decoded into per-thread f32 scratch (at most 64 rows,
// never the cache) and scored / accumulated by the host's tile kernels; the incomplete block's
// rows are read from the input-dtype tail as they are.
#include <cstdint>

#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

class AdaKVCache;

class AdaKVRows final : public attention::RowSource {
 public:
  explicit AdaKVRows(const AdaKVCache& cache);

  int64_t key_dim() const override;
  int64_t value_dim() const override;
  int64_t rows(int64_t, int64_t) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  const AdaKVCache& cache_;
  attention::PlainRows tail_k_, tail_v_;
};

}  // namespace veloxquant
