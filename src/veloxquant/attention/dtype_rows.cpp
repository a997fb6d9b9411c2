#include "veloxquant/attention/dtype_rows.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "lm/kernels/simd_dot.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/tile_kernels.h"

namespace veloxquant::attention {

void widen_rows(const std::byte* head_base, lm::DType dtype, int64_t row_bytes, int64_t j0, int64_t j1, int64_t dim,
                float* out) {
  const int64_t es = static_cast<int64_t>(lm::dtype_size(dtype));
  const std::byte* first = head_base + j0 * row_bytes;
  if (row_bytes == dim * es) {
    // Back-to-back rows: one conversion call for the whole tile.
    const int64_t n = (j1 - j0) * dim;
    if (dtype == lm::DType::F16) {
      lm::kernels::simd::f16_to_f32(reinterpret_cast<const uint16_t*>(first), out, n);
    } else if (dtype == lm::DType::BF16) {
      lm::kernels::simd::bf16_to_f32(reinterpret_cast<const uint16_t*>(first), out, n);
    } else {
      std::copy_n(reinterpret_cast<const float*>(first), n, out);
    }
    return;
  }
  for (int64_t j = j0; j < j1; ++j, out += dim) widen_rows(head_base + j * row_bytes, dtype, dim * es, 0, 1, dim, out);
}

PlainRows PlainRows::of(const lm::Tensor& t) {
  if (t.ndim() != 4 || t.strides()[3] != 1 ||
      (t.dtype() != lm::DType::F16 && t.dtype() != lm::DType::BF16 && t.dtype() != lm::DType::F32)) {
    throw base::InvalidArgument(
        "attention: plain rows must be a [B, H, T, D] f16/bf16/f32 tensor with contiguous rows, got " +
        lm::shape_text(t.shape()) + " " + std::string(lm::dtype_name(t.dtype())));
  }
  const int64_t es = static_cast<int64_t>(t.element_size());
  PlainRows p;
  p.data = t.raw_data();
  p.dtype = t.dtype();
  p.batch_stride_bytes = t.strides()[0] * es;
  p.head_stride_bytes = t.strides()[1] * es;
  p.row_bytes = t.strides()[2] * es;
  p.dim = t.dim(3);
  return p;
}

// Up to this many queries per tile (a decode step's GQA group, short prefill tiles) f16 keys
// are scored in place, each row chunk widened once per three queries; more queries widen the
// tile to f32 once and share it.
constexpr int64_t kInPlaceQueries = 12;

void score_plain_tile(const PlainRows& keys, int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                      int64_t n_queries, float* scores, int64_t ld, TileScratch& scratch) {
  const int64_t n = j1 - j0;
  if (keys.dtype == lm::DType::F32 && keys.row_bytes % 4 == 0) {
    const auto* rows = reinterpret_cast<const float*>(keys.head(b, h) + j0 * keys.row_bytes);
    kernels::score_rows(prepared, keys.dim, n_queries, rows, keys.row_bytes / 4, n, keys.dim, scores, ld);
    return;
  }
  if (keys.dtype == lm::DType::F16 && keys.row_bytes % 2 == 0 && n_queries <= kInPlaceQueries) {
    // f16 rows scored in place, each row chunk widened in registers once for up to three
    // queries (the host's own decode path): bit-identical to widening the tile first, without
    // the f32 copy (an eviction cache's f16 rows spent 11% of a decode step converting them).
    const auto* rows = reinterpret_cast<const uint16_t*>(keys.head(b, h) + j0 * keys.row_bytes);
    lm::kernels::tiles::score_rows_f16(prepared, keys.dim, n_queries, rows, keys.row_bytes / 2, n, keys.dim, scores, ld,
                                       keys.prefetch_rows);
    return;
  }
  float* tile = scratch.f32(static_cast<std::size_t>(n * keys.dim));
  keys.widen(b, h, j0, j1, tile);
  kernels::score_rows(prepared, keys.dim, n_queries, tile, keys.dim, n, keys.dim, scores, ld);
}

void accumulate_plain_tile(const PlainRows& values, int64_t b, int64_t h, int64_t j0, int64_t j1, const TileWeights& w,
                           float* acc, TileScratch& scratch, int64_t prefetch_rows) {
  const auto [weights, n_queries, ld] = w;
  const int64_t n = j1 - j0;
  if (values.dtype == lm::DType::F32 && values.row_bytes % 4 == 0) {
    const auto* rows = reinterpret_cast<const float*>(values.head(b, h) + j0 * values.row_bytes);
    kernels::accumulate_rows(weights, ld, n_queries, rows, values.row_bytes / 4, n, values.dim, acc, values.dim);
    return;
  }
  if (values.dtype == lm::DType::F16 && values.row_bytes % 2 == 0) {
    // f16 rows widened in registers, as the host's own attention reads them: no f32 tile.
    const auto* rows = reinterpret_cast<const uint16_t*>(values.head(b, h) + j0 * values.row_bytes);
    kernels::accumulate_rows_f16(weights, ld, n_queries, rows, values.row_bytes / 2, n, values.dim, acc, values.dim,
                                 prefetch_rows);
    return;
  }
  float* tile = scratch.f32(static_cast<std::size_t>(n * values.dim));
  values.widen(b, h, j0, j1, tile);
  kernels::accumulate_rows(weights, ld, n_queries, tile, values.dim, n, values.dim, acc, values.dim);
}

DtypeRowSource::DtypeRowSource(const lm::Tensor& keys, const lm::Tensor& values, int64_t rows, int64_t position_base)
    : keys_(PlainRows::of(keys)), values_(PlainRows::of(values)), rows_(rows), position_base_(position_base) {
  if (keys.dim(0) != values.dim(0) || keys.dim(1) != values.dim(1) || rows > keys.dim(2) || rows > values.dim(2)) {
    throw base::InvalidArgument("DtypeRowSource: keys " + lm::shape_text(keys.shape()) + " and values " +
                                lm::shape_text(values.shape()) + " cannot hold " + std::to_string(rows) + " rows");
  }
}

DtypeRowSource::DtypeRowSource(const lm::Tensor& keys, const lm::Tensor& values, int64_t value_first, int64_t rows,
                               int64_t position_base)
    : DtypeRowSource(keys, values, 0, position_base) {
  if (value_first < 0 || rows < 0 || rows > keys.dim(2) || value_first + rows > values.dim(2)) {
    throw base::InvalidArgument("DtypeRowSource: values " + lm::shape_text(values.shape()) + " cannot hold " +
                                std::to_string(rows) + " rows from row " + std::to_string(value_first) + ", keys " +
                                lm::shape_text(keys.shape()));
  }
  values_.data += value_first * values_.row_bytes;
  rows_ = rows;
}

void DtypeRowSource::set_positions(const int32_t* positions, int64_t head_stride, int64_t batch_stride) {
  positions_ = positions;
  pos_head_stride_ = head_stride;
  pos_batch_stride_ = batch_stride;
}

}  // namespace veloxquant::attention
