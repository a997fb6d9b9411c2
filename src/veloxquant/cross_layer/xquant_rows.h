#pragma once
// xquant's storage (cross_layer/xquant_cache.h) as one RowSource for the shared attention driver
// (decode steps; prefill calls attend over the fetched rows). A tile's rows below the frontier
// are decoded from their block (anchor codes, this layer's per-token-group (scale, min), and a
// reuse layer's residual) into per-thread scratch, f32 [rows, D], rounded to the cache's dtype
// as update_and_fetch returns them, and scored / accumulated with the shared tile kernels
// (attention/decoded_run_rows.h); the full-precision tail is read in its dtype. A tile decodes
// only its own rows (at most 64): nothing of the cache is materialised per step.
#include <cstdint>

#include "veloxquant/attention/decoded_run_rows.h"

namespace veloxquant {

class XQuantCache;

class XQuantRows final : public attention::DecodedRunRows {
 public:
  explicit XQuantRows(const XQuantCache& cache);

 private:
  int64_t decode_run(int64_t b, int64_t h, int64_t a, int64_t end, bool keys, attention::TileScratch& scratch,
                     const float** rows) const override;

  const XQuantCache& cache_;
};

}  // namespace veloxquant
