#pragma once
// What one a2ats attention call reads (caches/a2ats_cache.h), as the single RowSource of the
// shared attention driver (every segment of a call must share one prepared-query form): per
// (b, h), rows [0, K) are the retrieved far rows, then the exact tail, then the call's own rows.
//
// Far keys are one centroid per sub-vector, so <q, k_j> = sum_m <q_m, c_m[code_jm]>:
// prepare_query computes the table lut[m][c] = <q_m, c_m[c]> once per query and call
// (D/sub x 2^bits dot products of sub floats) and keeps the raw query after it for the exact
// rows; a far row then costs D/sub lookups and adds. Values are read exact. When the call's
// retrieval scored every far row already (A2atsCallRows::far_dots), those scores are read
// instead: the tables are built once per query, by the retrieval, not twice.
#include <cstdint>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/window_call_rows.h"

namespace veloxquant {

// lut[m * entries + c] = <query[m * sub ...], centroid c of sub-vector m> for the f32 codebook in
// transposed layout [subs][sub][entries] (the layout the cache stores it in).
void a2ats_lookup_table(const float* centroids, int64_t subs, int64_t entries, int64_t sub, const float* query,
                        float* lut);

struct A2atsCallRows {
  const float* centroids = nullptr;  // f32 [subs][sub][entries] (transposed), decoded for this call
  int64_t subs = 0, entries = 0, sub = 0, heads = 0;
  const lm::Tensor* codes = nullptr;       // U8 [B, H, cap, subs]; far row i = position i
  const lm::Tensor* far_values = nullptr;  // [B, H, cap, Dv]
  const lm::Tensor* tail_k = nullptr;      // [B, H, window, D], `tail` rows
  const lm::Tensor* tail_v = nullptr;
  const lm::Tensor* call_k = nullptr;  // [B, H, s, D] contiguous, the call's rows
  const lm::Tensor* call_v = nullptr;
  int64_t far = 0, tail = 0, s = 0;  // far = retrieved rows per head
  // Per (b * heads + h): far + tail + s ascending positions (retrieved far rows first).
  const std::vector<std::vector<int32_t>>* positions = nullptr;
  // Optional: the retrieval's dot products <q, far key i> (same tables, same order of adds, so
  // the same floats), far_rows per query row (b * Hq + query head) * n + query, for the call's
  // queries `queries` (f32 [B, Hq, n, D]). With them a far row is scored by one read per query
  // and no query builds a second table: prepare_query stores only the query's row index.
  const float* far_dots = nullptr;
  const float* queries = nullptr;
  int64_t far_rows = 0;
};

class A2atsRows final : public attention::RowSource {
 public:
  explicit A2atsRows(const A2atsCallRows& rows);

  int64_t key_dim() const override { return key_dim_; }
  int64_t value_dim() const override { return far_values_.dim; }
  int64_t rows(int64_t, int64_t) const override { return r_.far + r_.tail + r_.s; }
  const int32_t* positions(int64_t b, int64_t h) const override {
    return (*r_.positions)[static_cast<std::size_t>(b * r_.heads + h)].data();
  }
  int64_t prepared_dim() const override { return head_ + key_dim_; }
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  A2atsCallRows r_;
  int64_t key_dim_;
  int64_t head_;  // floats before the raw query in a prepared query: the table, or 1 (the row index)
  attention::PlainRows far_values_;
  WindowCallRows exact_;
};

}  // namespace veloxquant
