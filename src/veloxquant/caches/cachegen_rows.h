#pragma once
// cachegen's storage (caches/cachegen_cache.h) as one RowSource for the attention driver. A tile's
// rows below the frontier are read block by block: the block's rANS record is decoded into
// per-thread scratch (integer codes, then f32 rows [G, D]) and scored / accumulated with the
// shared tile kernels (attention/decoded_run_rows.h); the tails' rows are read from the input
// dtype. A block is decoded once per tile that touches it (tiles are 64 rows, blocks G rows),
// never the whole cache at once.
#include <cstdint>

#include "veloxquant/attention/decoded_run_rows.h"

namespace veloxquant {

class CachegenCache;

class CachegenRows final : public attention::DecodedRunRows {
 public:
  explicit CachegenRows(const CachegenCache& cache);

 private:
  int64_t decode_run(int64_t b, int64_t h, int64_t a, int64_t end, bool keys, attention::TileScratch& scratch,
                     const float** rows) const override;

  const CachegenCache& cache_;
};

}  // namespace veloxquant
