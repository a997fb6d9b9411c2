#include "veloxquant/caches/amc_rows.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/amc_latent_columns.h"
#include "veloxquant/caches/svdq_latent_decode.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

void amc_decode_latent_row(const SvdqLayout& layout, const uint8_t* row, const uint16_t* params, int64_t group,
                           float* scale, float* min, float* out) {
  for (int64_t i = 0; i < layout.coded; ++i) {
    scale[i] = base::f16_to_f32(params[2 * (i / group)]);
    min[i] = base::f16_to_f32(params[2 * (i / group) + 1]);
  }
  decode_latent_rows(layout, row, layout.row_bytes, 1, scale, min, out);
}

const int32_t* AmcLatentRows::positions(int64_t b, int64_t h) const { return row_ptr<int32_t>(*t_.positions, b, h, 0); }

namespace {

// Ids of AmcLatentRows objects (one per tier and fused call): a projected query cached under one
// id is only reused by the same tier of the same call, whose key table cannot have changed.
std::atomic<uint64_t> next_source_id{1};

// The query projection of the last tile scored on this thread: <q, mean> and C q for every query
// of the tile, reused while the same tier of the same call scores the same (b, h) and queries (a
// decode split or a prefill unit walks all its tiles with one block of queries). Grow-only.
struct ProjectionCache {
  uint64_t source = 0;
  int64_t b = -1, h = -1, n_queries = 0, dim = 0;
  std::vector<float> queries, projected;
};
thread_local ProjectionCache projection_cache;

// One row of r dense LSB-first codes of 8 or 4 bits, with one (scale, min) pair per group of
// `group` codes in p (already widened to f32). Coordinate i goes to z[i * z_stride] (the tile's
// latent coordinates are kept coordinate-major).
void decode_dense_row(const uint8_t* row, const float* p, int64_t r, int64_t group, int bits, float* z,
                      int64_t z_stride) {
  for (int64_t first = 0, g = 0; first < r; first += group, ++g) {
    const float scale = p[2 * g], min = p[2 * g + 1];
    const int64_t last = std::min(r, first + group);
    if (bits == 8) {
      for (int64_t i = first; i < last; ++i) z[i * z_stride] = static_cast<float>(row[i]) * scale + min;
    } else {
      for (int64_t i = first; i < last; ++i)
        z[i * z_stride] = static_cast<float>((row[i >> 1] >> ((i & 1) * 4)) & 15) * scale + min;
    }
  }
}

// Scratch of decode(): the tile's latent [r, n], then 3 r floats and the tile's widened (scale,
// min) pairs (at most 2 (r + 1) per row).
std::size_t latent_floats(int64_t n, int64_t r) { return static_cast<std::size_t>(n * r + 3 * r + n * (2 * r + 2)); }

}  // namespace

AmcLatentRows::AmcLatentRows(const AmcLatentTensors& t, const SvdqLayout& key_layout, const SvdqLayout& value_layout,
                             int64_t group, int64_t rows)
    : t_(t),
      layout_(key_layout),
      value_layout_(value_layout),
      group_(group),
      rows_(rows),
      id_(next_source_id.fetch_add(1, std::memory_order_relaxed)) {}

void AmcLatentRows::decode(const SvdqLayout& layout, const lm::Tensor& codes, const lm::Tensor& params, int64_t b,
                           int64_t h, int64_t j0, int64_t j1, float* tmp, float* out) const {
  const int64_t r = layout.coded, n = j1 - j0;
  const int bits = layout.groups.empty() ? 0 : layout.groups.front().bits;
  const uint8_t* row = row_ptr<uint8_t>(codes, b, h, j0);
  const uint16_t* p = row_ptr<uint16_t>(params, b, h, j0);
  const int64_t row_stride = codes.strides()[2], param_stride = params.strides()[2];
  // amc's widths are 8 (Mid) and 4 (Low): groups of 8 codes end on byte edges at both, so a row is
  // one dense LSB-first stream of r codes, decoded here in one plain loop per (scale, min) group
  // (two f16 conversions per group and row, not per coordinate).
  if (bits == 8 || bits == 4) {
    // The tile's (scale, min) pairs widened in one pass (f16 -> f32 is exact, so the values are
    // those of a conversion per group), then one plain loop per row and group.
    const int64_t pair_floats = 2 * ((r + group_ - 1) / group_);
    float* wide = tmp + 3 * r;
    if (param_stride == pair_floats) {
      lm::kernels::simd::f16_to_f32(p, wide, n * pair_floats);
    } else {
      for (int64_t j = 0; j < n; ++j)
        lm::kernels::simd::f16_to_f32(p + j * param_stride, wide + j * pair_floats, pair_floats);
    }
    if (pair_floats == 2) {  // one (scale, min) per row (r <= group: amc's tiers at its defaults)
      amc_latent_columns(row, row_stride, n, r, bits, wide, out);
      return;
    }
    for (int64_t j = 0; j < n; ++j) {
      decode_dense_row(row + j * row_stride, wide + j * pair_floats, r, group_, bits, out + j, n);
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    float* z = tmp + 2 * r;
    amc_decode_latent_row(layout, row + j * row_stride, p + j * param_stride, group_, tmp, tmp + r, z);
    for (int64_t i = 0; i < r; ++i) out[i * n + j] = z[i];
  }
}

const float* AmcLatentRows::projected_queries(int64_t b, int64_t h, const float* prepared, int64_t n_queries) const {
  const int64_t dk = layout_.dim, width = 1 + layout_.coded;
  ProjectionCache& c = projection_cache;
  const auto q_floats = static_cast<std::size_t>(n_queries * dk);
  if (c.source == id_ && c.b == b && c.h == h && c.n_queries == n_queries && c.dim == dk &&
      std::memcmp(c.queries.data(), prepared, q_floats * sizeof(float)) == 0) {
    return c.projected.data();
  }
  if (c.queries.size() < q_floats) c.queries.resize(q_floats);
  if (c.projected.size() < static_cast<std::size_t>(n_queries * width)) {
    c.projected.resize(static_cast<std::size_t>(n_queries * width));
  }
  std::memcpy(c.queries.data(), prepared, q_floats * sizeof(float));
  attention::kernels::score_rows(prepared, dk, n_queries, row_ptr<float>(*t_.key_table, b, h, 0), dk, width, dk,
                                 c.projected.data(), width);
  c.source = id_;
  c.b = b;
  c.h = h;
  c.n_queries = n_queries;
  c.dim = dk;
  return c.projected.data();
}

void AmcLatentRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                               float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t r = layout_.coded, n = j1 - j0, width = 1 + r;
  // <q, mean> and C q, once per block of queries (not per tile: the table is the head's).
  const float* projected = projected_queries(b, h, prepared, n_queries);
  // The tile's latent keys coordinate-major [r, n]: each score row is then <q, mean> plus r
  // multiply-adds of a coordinate's n values, vectors along the rows (r is 22 or 4 here, too
  // narrow for vectors along the coordinates).
  float* latent = scratch.f32(latent_floats(n, r));
  decode(layout_, *t_.key_codes, *t_.key_params, b, h, j0, j1, latent + n * r, latent);
  for (int64_t q = 0; q < n_queries; ++q) std::fill(scores + q * ld, scores + q * ld + n, projected[q * width]);
  attention::kernels::accumulate_rows(projected + 1, width, n_queries, latent, n, r, n, scores, ld);
}

void AmcLatentRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                    int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t r = value_layout_.coded, n = j1 - j0, width = 1 + r, dv = value_layout_.dim;
  float* latent = scratch.f32(latent_floats(n, r));
  decode(value_layout_, *t_.value_codes, *t_.value_params, b, h, j0, j1, latent + n * r, latent);
  // mixed[q] = (sum_j w_qj, sum_j w_qj z_j): the tile's weights in latent space, each coordinate a
  // dot product of the weights with that coordinate's n values (coordinate-major latent).
  float* mixed = scratch.f32_second(static_cast<std::size_t>(n_queries * width));
  for (int64_t q = 0; q < n_queries; ++q) {
    float sum = 0.0f;
    for (int64_t jj = 0; jj < n; ++jj) sum += weights[q * ld + jj];
    mixed[q * width] = sum;
  }
  attention::kernels::score_rows(weights, ld, n_queries, latent, n, r, n, mixed + 1, width);
  attention::kernels::accumulate_rows(mixed, width, n_queries, row_ptr<float>(*t_.value_table, b, h, 0), dv, width, dv,
                                      acc, dv);
}

}  // namespace veloxquant
