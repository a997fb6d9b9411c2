#pragma once
// xquant's storage (cross_layer/xquant_cache.h) as one RowSource for the shared attention driver,
// scored and accumulated straight from the codes (decode steps; prefill calls attend over the
// fetched rows).
//
// xquant quantizes keys and values alike along the token axis: token group g of a block holds,
// per channel c, one (scale s_gc, min m_gc), and a row's element is code_tc s_gc + m_gc (a reuse
// layer adds its residual, quantized the same way with its own codes and pairs). So, for a query
// q and a run of rows inside one token group,
//   <q, k_t>          = sum_c (q_c s_gc) code_tc + sum_c q_c m_gc
//   sum_t w_t v_tc    = s_gc sum_t w_t code_tc + m_gc sum_t w_t
// — keys are KIVI's per-channel keys (the query folded into the group's scales once per group,
// then integer or f32 dots from the packed planes, attention/integer_key_scores.h and
// float_key_scores.h), values are the same algebra transposed: the raw weights accumulate the
// codes (attention/tile_kernels.h accumulate_planes) and the group's pairs scale the sums once
// per run. Nothing is decoded to f32 rows, and no f16 round trip is made: the fused result is the
// exact attention over the f32 dequantized rows up to float reassociation and the 16-bit query
// rounding of the integer key path, where update_and_fetch's rows are rounded to the cache's
// dtype. Widths that do not read by planes (3, 5, 6, 7 bits) unpack a run's codes into an f32
// tile and take the same algebra with the f32 tile kernels.
#include <cstdint>

#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

class XQuantCache;

// The code orders of one cache shape (built once, when the cache learns its head dims): the
// anchor's codes and the residual's, keys and values.
struct XQuantCodeOrders {
  XQuantCodeOrders(int base_bits, int residual_bits, int64_t key_dim, int64_t value_dim);
  attention::CodeOrder base_keys, base_values, residual_keys, residual_values;
};

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

  // One set of codes of a token-group run: its packed code rows, its (scale, min) pairs and the
  // order its codes unpack in.
  struct CodeSet {
    const uint32_t* first_row;  // the run's first row
    int64_t row_words;          // u32 words between rows
    const float* pairs;         // the run's token group: (scale, min) per channel, interleaved
    const attention::CodeOrder* order;
  };

 private:
  // The quantized rows [a, end) of (b, h) lie in one block and one token group: its code sets
  // (the anchor's, then the residual's when the layer has one). Returns how many.
  int code_sets(int64_t b, int64_t h, int64_t a, int64_t* end, bool keys, CodeSet sets[2]) const;

  const XQuantCache& cache_;
  attention::PlainRows tail_keys_, tail_values_;
};

}  // namespace veloxquant
