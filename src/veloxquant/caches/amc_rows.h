#pragma once
// One of amc's latent tiers (Mid, Low; caches/amc_cache.h) as a RowSource for the shared driver.
//
// A row holds r latent coordinates of its key and of its value on the head's PCA bases (tables
// [B, H, 1 + r_mid, D]: row 0 the mean, then the directions; a tier of rank r reads the first r),
// each quantized per token (f16 scale and min per group of G coordinates).
//   score:      <q, k> = <q, mean_k> + <K q, z>: the query projected on the 1 + r table rows once
//               per block of queries and head (not per tile), the tile's latent keys decoded
//               coordinate-major and scored in r dimensions with vectors along the rows.
//   accumulate: sum_j w_j v_j = (sum_j w_j) mean_v + (sum_j w_j z_j) V: the weights are summed
//               in latent space over the tile and turned into the value basis once per tile.
// Rows carry their true positions (ascending per head): a tier holds a subset of the tokens.
#include <cstdint>

#include "lm/tensor.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/svdq_layout.h"

namespace veloxquant {

struct AmcLatentTensors {
  const lm::Tensor* key_codes;     // U8  [B, H, cap, layout.row_bytes]
  const lm::Tensor* key_params;    // F16 [B, H, cap, 2 * groups]
  const lm::Tensor* value_codes;   // U8  [B, H, cap, value_layout.row_bytes]
  const lm::Tensor* value_params;  // F16 [B, H, cap, 2 * groups]
  const lm::Tensor* positions;     // I32 [B, H, cap, 1]
  const lm::Tensor* key_table;     // F32 [B, H, 1 + r_mid, Dk]
  const lm::Tensor* value_table;   // F32 [B, H, 1 + r_mid, Dv]
};

// Decodes one row's latent coordinates (per-token params, `group` coordinates per (scale, min)).
void amc_decode_latent_row(const SvdqLayout& layout, const uint8_t* row, const uint16_t* params, int64_t group,
                           float* scale_scratch, float* min_scratch, float* out);

class AmcLatentRows final : public attention::RowSource {
 public:
  AmcLatentRows(const AmcLatentTensors& t, const SvdqLayout& key_layout, const SvdqLayout& value_layout, int64_t group,
                int64_t rows);

  int64_t key_dim() const override { return layout_.dim; }
  int64_t value_dim() const override { return value_layout_.dim; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  const int32_t* positions(int64_t b, int64_t h) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  // Latent rows [j0, j1) of codes/params into out coordinate-major [r, n] (out[i * n + j]); uses
  // 3 r + n (2 r + 2) floats of `tmp`.
  void decode(const SvdqLayout& layout, const lm::Tensor& codes, const lm::Tensor& params, int64_t b, int64_t h,
              int64_t j0, int64_t j1, float* tmp, float* out) const;
  // <q, mean_k> then C q for each of the n_queries prepared queries (stride 1 + r), computed once
  // per thread for a run of tiles with the same (b, h) and queries (a per-thread cache keyed by
  // this object's id_, unique per tier and call).
  const float* projected_queries(int64_t b, int64_t h, const float* prepared, int64_t n_queries) const;
  AmcLatentTensors t_;
  const SvdqLayout& layout_;
  const SvdqLayout& value_layout_;
  int64_t group_, rows_;
  uint64_t id_;
};

}  // namespace veloxquant
