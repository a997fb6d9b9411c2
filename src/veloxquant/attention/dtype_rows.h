#pragma once
// Row tiles of plain float storage — f16, bf16 or f32 rows lying back to back per (batch, head),
// as a cache's [B, H, capacity, D] buffer holds them — widened to f32 for the tile kernels. The
// building block of every source that keeps some rows unquantized (KIVI's full-precision tail,
// turboquant_rvq's f16 values, an eviction cache's dtype storage) and a RowSource of its own.
#include <cstddef>
#include <cstdint>

#include "lm/dtype.h"
#include "lm/tensor.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant::attention {

// Rows [j0, j1) of a head whose row 0 is at `head_base` (rows `row_bytes` apart, `dim` elements
// of `dtype` each, contiguous within a row) into f32 [j1 - j0, dim].
void widen_rows(const std::byte* head_base, lm::DType dtype, int64_t row_bytes, int64_t j0, int64_t j1, int64_t dim,
                float* out);

// A view of one plain tensor [B, H, capacity, D] (rows of a head contiguous): where head (b, h)
// starts and how far apart its rows are.
struct PlainRows {
  const std::byte* data = nullptr;
  lm::DType dtype = lm::DType::F16;
  int64_t head_stride_bytes = 0, batch_stride_bytes = 0, row_bytes = 0, dim = 0;
  // > 0: score_plain_tile hints the f16 key rows that many ahead of the ones it scores into the
  // cache (lm::kernels::tiles::score_rows_f16), for a reader streaming a long cache from DRAM
  // during a decode step; it changes no result.
  int64_t prefetch_rows = 0;

  static PlainRows of(const lm::Tensor& t);  // t: [B, H, cap, D], innermost two dims contiguous
  const std::byte* head(int64_t b, int64_t h) const { return data + b * batch_stride_bytes + h * head_stride_bytes; }
  void widen(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out) const {
    widen_rows(head(b, h), dtype, row_bytes, j0, j1, dim, out);
  }
};

// Scores and accumulates plain rows of (b, h): the tile widened once, then every query of the
// block reads it (tile_kernels.h). prefetch_rows > 0 (f16 values only): the accumulation hints
// the rows that many ahead into the cache (lm::kernels::tiles::accumulate_rows_f16), for a
// caller whose values stream from DRAM during a decode step; it changes no result.
void score_plain_tile(const PlainRows& keys, int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                      int64_t n_queries, float* scores, int64_t ld, TileScratch& scratch);
void accumulate_plain_tile(const PlainRows& values, int64_t b, int64_t h, int64_t j0, int64_t j1, const TileWeights& w,
                           float* acc, TileScratch& scratch, int64_t prefetch_rows = 0);

// A RowSource over plain key and value tensors holding `rows` rows per head, at contiguous
// positions from `position_base` or at explicit ascending `positions` ([B, H, >= rows] I32).
class DtypeRowSource final : public RowSource {
 public:
  DtypeRowSource(const lm::Tensor& keys, const lm::Tensor& values, int64_t rows, int64_t position_base = 0);
  // Rows start at row `value_first` of the value tensor (default 0): a view of [value_first,
  // value_first + rows) without slicing the tensor (a slice allocates its shape; this is per step).
  DtypeRowSource(const lm::Tensor& keys, const lm::Tensor& values, int64_t value_first, int64_t rows,
                 int64_t position_base);
  void set_positions(const int32_t* positions, int64_t head_stride, int64_t batch_stride);

  int64_t key_dim() const override { return keys_.dim; }
  int64_t value_dim() const override { return values_.dim; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  const int32_t* positions(int64_t b, int64_t h) const override {
    return positions_ ? positions_ + b * pos_batch_stride_ + h * pos_head_stride_ : nullptr;
  }
  int64_t position_base() const override { return position_base_; }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, TileScratch& scratch) const override {
    score_plain_tile(keys_, b, h, j0, j1, prepared, n_queries, scores, ld, scratch);
  }
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, TileScratch& scratch) const override {
    accumulate_plain_tile(values_, b, h, j0, j1, {weights, n_queries, ld}, acc, scratch);
  }

 private:
  PlainRows keys_, values_;
  int64_t rows_;
  int64_t position_base_;
  const int32_t* positions_ = nullptr;
  int64_t pos_head_stride_ = 0, pos_batch_stride_ = 0;
};

}  // namespace veloxquant::attention
