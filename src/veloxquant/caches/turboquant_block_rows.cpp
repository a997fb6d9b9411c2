#include "veloxquant/caches/turboquant_block_rows.h"

#include <algorithm>

#include "base/half.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/caches/turboquant_block_cache.h"

namespace veloxquant {
namespace {

// Pi mu for the mean `mu` (f16, dim values) into out; false (out untouched) without a mean.
bool rotated_mean(const uint16_t* mu, int64_t dim, const core::Rotation& rotation, float* out) {
  if (mu == nullptr) return false;
  for (int64_t e = 0; e < dim; ++e) out[e] = base::f16_to_f32(mu[e]);
  rotation.forward(out, out);
  return true;
}

}  // namespace

TurboQuantBlockRows::TurboQuantBlockRows(const TurboQuantBlockCache& cache, int64_t rows) : cache_(cache), rows_(rows) {}

int64_t TurboQuantBlockRows::key_dim() const { return cache_.head_dim(); }
int64_t TurboQuantBlockRows::value_dim() const { return cache_.value_dim(); }

void TurboQuantBlockRows::prepare_query(const float* query, float* prepared) const {
  cache_.key_rotation().forward(query, prepared);
}

void TurboQuantBlockRows::rotated_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const {
  const int64_t d = cache_.head_dim(), sinks = cache_.sink_rows_held();
  float* mu = work;          // Pi mu
  float* plain = work + d;   // a sink row before rotation
  const bool has_mean = rotated_mean(cache_.key_mean(b, h), d, cache_.key_rotation(), mu);
  for (int64_t j = j0; j < j1; ++j) {
    float* row = out + (j - j0) * d;
    if (j < sinks) {
      cache_.decode_key(b, h, j, plain, row);  // exact f16 row in the model's basis
      cache_.key_rotation().forward(plain, row);
      continue;
    }
    cache_.decode_rotated_key(b, h, j, row);
    if (has_mean) {
      for (int64_t e = 0; e < d; ++e) row[e] += mu[e];
    }
  }
}

void TurboQuantBlockRows::rotated_values(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const {
  const int64_t dv = cache_.value_dim(), sinks = cache_.sink_rows_held();
  float* mu = work;
  float* plain = work + dv;
  const bool has_mean = rotated_mean(cache_.value_mean(b, h), dv, cache_.value_rotation(), mu);
  for (int64_t j = j0; j < j1; ++j) {
    float* row = out + (j - j0) * dv;
    if (j < sinks) {
      cache_.decode_value(b, h, j, plain, row);
      cache_.value_rotation().forward(plain, row);
      continue;
    }
    cache_.decode_rotated_value(b, h, j, row);
    if (has_mean) {
      for (int64_t e = 0; e < dv; ++e) row[e] += mu[e];
    }
  }
}

void TurboQuantBlockRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                     int64_t n_queries, float* scores, int64_t ld,
                                     attention::TileScratch& scratch) const {
  const int64_t d = cache_.head_dim(), n = j1 - j0;
  const int64_t work = 2 * std::max(d, cache_.value_dim());
  float* rows = scratch.f32(static_cast<std::size_t>(n * d + work));
  rotated_keys(b, h, j0, j1, rows, rows + n * d);
  attention::kernels::score_rows(prepared, d, n_queries, rows, d, n, d, scores, ld);
}

void TurboQuantBlockRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                          int64_t n_queries, int64_t ld, float* acc,
                                          attention::TileScratch& scratch) const {
  const int64_t dv = cache_.value_dim(), n = j1 - j0;
  const int64_t work = 2 * std::max(cache_.head_dim(), dv);
  float* rows = scratch.f32(static_cast<std::size_t>(n * dv + work));
  rotated_values(b, h, j0, j1, rows, rows + n * dv);
  attention::kernels::accumulate_rows(weights, ld, n_queries, rows, dv, n, dv, acc, dv);
}

void TurboQuantBlockRows::finish_row(float* row) const {
  // Rotation::inverse accepts the same buffer for input and output.
  cache_.value_rotation().inverse(row, row);
}

}  // namespace veloxquant
