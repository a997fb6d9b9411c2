#include "veloxquant/attention/decoded_run_rows.h"

#include <algorithm>

#include "lm/kernels/attention_tiles.h"

namespace veloxquant::attention {

DecodedRunRows::DecodedRunRows(int64_t key_dim, int64_t value_dim, int64_t rows, int64_t frontier,
                               const lm::Tensor& tail_keys, const lm::Tensor& tail_values)
    : key_dim_(key_dim),
      value_dim_(value_dim),
      rows_(rows),
      frontier_(frontier),
      tail_keys_(PlainRows::of(tail_keys)),
      tail_values_(PlainRows::of(tail_values)) {}

void DecodedRunRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                                float* scores, int64_t ld, TileScratch& scratch) const {
  const int64_t d = key_dim_, pd = prepared_dim();
  const int64_t quantized_end = std::min(j1, frontier_);
  for (int64_t a = j0; a < quantized_end;) {
    const float* rows = nullptr;
    const int64_t end = decode_run(b, h, a, quantized_end, true, scratch, &rows);
    lm::kernels::tiles::score_rows(prepared, pd, n_queries, rows, d, end - a, d, scores + (a - j0), ld);
    a = end;
  }
  if (j1 > frontier_) {  // the tail's keys, rows from the frontier on in their own buffer
    const int64_t t0 = std::max(j0, frontier_);
    score_plain_tile(tail_keys_, b, h, t0 - frontier_, j1 - frontier_, prepared, n_queries, scores + (t0 - j0), ld,
                     scratch);
  }
}

void DecodedRunRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                     int64_t n_queries, int64_t ld, float* acc, TileScratch& scratch) const {
  const int64_t d = value_dim_;
  const int64_t quantized_end = std::min(j1, frontier_);
  for (int64_t a = j0; a < quantized_end;) {
    const float* rows = nullptr;
    const int64_t end = decode_run(b, h, a, quantized_end, false, scratch, &rows);
    lm::kernels::tiles::accumulate_rows(weights + (a - j0), ld, n_queries, rows, d, end - a, d, acc, d);
    a = end;
  }
  if (j1 > frontier_) {
    const int64_t t0 = std::max(j0, frontier_);
    accumulate_plain_tile(tail_values_, b, h, t0 - frontier_, j1 - frontier_, {weights + (t0 - j0), n_queries, ld}, acc,
                          scratch);
  }
}

}  // namespace veloxquant::attention
