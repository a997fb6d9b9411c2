#include "veloxquant/caches/amc_rows.h"

#include <algorithm>

#include "base/half.h"
#include "veloxquant/attention/tile_kernels.h"
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

AmcLatentRows::AmcLatentRows(const AmcLatentTensors& t, const SvdqLayout& key_layout, const SvdqLayout& value_layout,
                             int64_t group, int64_t rows)
    : t_(t), layout_(key_layout), value_layout_(value_layout), group_(group), rows_(rows) {}

const int32_t* AmcLatentRows::positions(int64_t b, int64_t h) const { return row_ptr<int32_t>(*t_.positions, b, h, 0); }

namespace {

// One row of r dense LSB-first codes of 8 or 4 bits, with one f16 (scale, min) pair per group
// of `group` codes in p: two f16 conversions per group, not per coordinate.
void decode_dense_row(const uint8_t* row, const uint16_t* p, int64_t r, int64_t group, int bits, float* z) {
  for (int64_t first = 0, g = 0; first < r; first += group, ++g) {
    const float scale = base::f16_to_f32(p[2 * g]), min = base::f16_to_f32(p[2 * g + 1]);
    const int64_t last = std::min(r, first + group);
    if (bits == 8) {
      for (int64_t i = first; i < last; ++i) z[i] = static_cast<float>(row[i]) * scale + min;
    } else {
      for (int64_t i = first; i < last; ++i)
        z[i] = static_cast<float>((row[i >> 1] >> ((i & 1) * 4)) & 15) * scale + min;
    }
  }
}

}  // namespace

void AmcLatentRows::decode(const SvdqLayout& layout, const lm::Tensor& codes, const lm::Tensor& params, int64_t b,
                           int64_t h, int64_t j0, int64_t j1, float* tmp, float* out) const {
  const int64_t r = layout.coded, n = j1 - j0;
  const int bits = layout.groups.empty() ? 0 : layout.groups.front().bits;
  // amc's widths are 8 (Mid) and 4 (Low): groups of 8 codes end on byte edges at both, so a row is
  // one dense LSB-first stream of r codes, decoded here in one plain loop per (scale, min) group
  // (two f16 conversions per group and row, not per coordinate).
  if (bits == 8 || bits == 4) {
    for (int64_t j = 0; j < n; ++j) {
      decode_dense_row(row_ptr<uint8_t>(codes, b, h, j0 + j), row_ptr<uint16_t>(params, b, h, j0 + j), r, group_, bits,
                       out + j * r);
    }
    return;
  }
  for (int64_t j = j0; j < j1; ++j) {
    amc_decode_latent_row(layout, row_ptr<uint8_t>(codes, b, h, j), row_ptr<uint16_t>(params, b, h, j), group_, tmp,
                          tmp + r, out + (j - j0) * r);
  }
}

void AmcLatentRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                               float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t r = layout_.coded, dk = layout_.dim, n = j1 - j0, width = 1 + r;
  float* projected = scratch.f32_second(static_cast<std::size_t>(n_queries * width));
  attention::kernels::score_rows(prepared, dk, n_queries, row_ptr<float>(*t_.key_table, b, h, 0), dk, width, dk,
                                 projected, width);
  float* latent = scratch.f32(static_cast<std::size_t>(n * r + 2 * r));
  decode(layout_, *t_.key_codes, *t_.key_params, b, h, j0, j1, latent + n * r, latent);
  attention::kernels::score_rows(projected + 1, width, n_queries, latent, r, n, r, scores, ld);
  for (int64_t q = 0; q < n_queries; ++q) {
    const float shift = projected[q * width];
    for (int64_t jj = 0; jj < n; ++jj) scores[q * ld + jj] += shift;
  }
}

void AmcLatentRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                    int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t r = value_layout_.coded, n = j1 - j0, width = 1 + r, dv = value_layout_.dim;
  float* latent = scratch.f32(static_cast<std::size_t>(n * r + 2 * r));
  decode(value_layout_, *t_.value_codes, *t_.value_params, b, h, j0, j1, latent + n * r, latent);
  // mixed[q] = (sum_j w_qj, sum_j w_qj z_j): the tile's weights in latent space.
  float* mixed = scratch.f32_second(static_cast<std::size_t>(n_queries * width));
  std::fill(mixed, mixed + n_queries * width, 0.0f);
  for (int64_t q = 0; q < n_queries; ++q) {
    float sum = 0.0f;
    for (int64_t jj = 0; jj < n; ++jj) sum += weights[q * ld + jj];
    mixed[q * width] = sum;
  }
  attention::kernels::accumulate_rows(weights, ld, n_queries, latent, r, n, r, mixed + 1, width);
  attention::kernels::accumulate_rows(mixed, width, n_queries, row_ptr<float>(*t_.value_table, b, h, 0), dv, width, dv,
                                      acc, dv);
}

}  // namespace veloxquant
