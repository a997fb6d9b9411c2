#pragma once
// xquant's storage (cross_layer/xquant_cache.h) as one RowSource for the shared attention driver.
// A tile's rows below the frontier are decoded from their block (anchor codes, this layer's
// per-token-group (scale, min), and a reuse layer's residual) into per-thread scratch, f32
// [rows, D], and scored / accumulated with the shared tile kernels; the full-precision tail is
// read in its dtype. A tile decodes only its own rows (at most 64): nothing of the cache is
// materialised per step, which is what made update_and_fetch's decode 0.08x the native cache.
#include <cstdint>

#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

class XQuantCache;

class XQuantRows final : public attention::RowSource {
 public:
  explicit XQuantRows(const XQuantCache& cache);

  int64_t key_dim() const override;
  int64_t value_dim() const override;
  int64_t rows(int64_t, int64_t) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  // Calls run(a, n, rows) for each run of quantized rows [a, a + n) of [j0, min(j1, frontier))
  // that lies in one block, rows = that run decoded (keys or values) into scratch.
  template <class Run>
  void for_decoded_runs(int64_t b, int64_t h, int64_t j0, int64_t j1, bool keys, attention::TileScratch& scratch,
                        const Run& run) const;

  const XQuantCache& cache_;
  attention::PlainRows tail_keys_, tail_values_;
};

}  // namespace veloxquant
