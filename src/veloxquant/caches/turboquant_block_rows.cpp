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

void TurboQuantBlockRows::rotated_rows(bool keys, int64_t b, int64_t h, int64_t j0, int64_t j1, float* out,
                                       float* work) const {
  const int64_t dim = keys ? cache_.head_dim() : cache_.value_dim();
  const core::Rotation& rotation = keys ? cache_.key_rotation() : cache_.value_rotation();
  float* mu = work;           // Pi mu
  float* plain = work + dim;  // a sink row before rotation
  const bool has_mean = rotated_mean(keys ? cache_.key_mean(b, h) : cache_.value_mean(b, h), dim, rotation, mu);
  // Sink rows: exact f16 rows in the model's basis, rotated here.
  const int64_t sinks_end = std::min(j1, std::max(j0, cache_.sink_rows_held()));
  for (int64_t j = j0; j < sinks_end; ++j) {
    float* row = out + (j - j0) * dim;
    if (keys) {
      cache_.decode_key(b, h, j, plain, row);
    } else {
      cache_.decode_value(b, h, j, plain, row);
    }
    rotation.forward(plain, row);
  }
  if (sinks_end == j1) return;
  // The coded rows lie contiguously: one tile decode, the rotated mean added in the same pass.
  const quant::BlockLloydQuantizer& quant = keys ? cache_.key_quantizer() : cache_.value_quantizer();
  const int d = static_cast<int>(dim);
  quant.decode_rows(keys ? cache_.key_codes(b, h, sinks_end) : cache_.value_codes(b, h, sinks_end),
                    static_cast<int64_t>(quant.code_bytes(d)),
                    keys ? cache_.key_scales(b, h, sinks_end) : cache_.value_scales(b, h, sinks_end),
                    static_cast<int64_t>(quant.blocks(d)), j1 - sinks_end, d, has_mean ? mu : nullptr,
                    out + (sinks_end - j0) * dim);
}

void TurboQuantBlockRows::rotated_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const {
  rotated_rows(true, b, h, j0, j1, out, work);
}

void TurboQuantBlockRows::rotated_values(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const {
  rotated_rows(false, b, h, j0, j1, out, work);
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
