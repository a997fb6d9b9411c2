#pragma once
// cachegen's storage (caches/cachegen_cache.h) as one RowSource for the attention driver. A tile's
// rows below the frontier are read block by block: the block's rANS record is decoded into
// per-thread scratch (integer codes, then f32 rows [G, D]) and scored / accumulated with the
// shared tile kernels; the tails' rows are read from the input dtype. A block is decoded once per
// tile that touches it (tiles are 64 rows, blocks G rows), never the whole cache at once.
#include <cstdint>

#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

class CachegenCache;

class CachegenRows final : public attention::RowSource {
 public:
  explicit CachegenRows(const CachegenCache& cache);

  int64_t key_dim() const override;
  int64_t value_dim() const override;
  int64_t rows(int64_t, int64_t) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  const CachegenCache& cache_;
  attention::PlainRows tail_keys_, tail_values_;
};

}  // namespace veloxquant
