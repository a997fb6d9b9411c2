#pragma once
// A RowSource for caches whose quantized rows [0, frontier) are decoded a run at a time into
// per-thread scratch (f32 [run, D]) and whose rows from the frontier on wait in a tail in the
// input dtype (cachegen's rANS blocks, xquant's token-group blocks). The base scores and
// accumulates both with the shared tile kernels; a cache supplies only decode_run.
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant::attention {

class DecodedRunRows : public RowSource {
 public:
  int64_t key_dim() const override { return key_dim_; }
  int64_t value_dim() const override { return value_dim_; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, TileScratch& scratch) const override;

 protected:
  // rows: rows stored; frontier: the first tail row; tails [B, H, cap, D] in the input dtype.
  DecodedRunRows(int64_t key_dim, int64_t value_dim, int64_t rows, int64_t frontier, const lm::Tensor& tail_keys,
                 const lm::Tensor& tail_values);

  // Decodes the run of rows that starts at `a` (< end <= frontier) and lies in one of the cache's
  // blocks, keys or values of (b, h), into scratch; *rows points at row `a` of it. Returns the
  // run's end (<= end).
  virtual int64_t decode_run(int64_t b, int64_t h, int64_t a, int64_t end, bool keys, TileScratch& scratch,
                             const float** rows) const = 0;

 private:
  int64_t key_dim_, value_dim_, rows_, frontier_;
  PlainRows tail_keys_, tail_values_;
};

}  // namespace veloxquant::attention
