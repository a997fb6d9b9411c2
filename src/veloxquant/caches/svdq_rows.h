#pragma once
// svdq's quantized blocks (caches/svdq_cache.h) as a RowSource for the attention driver.
//
// With B the head's coded latent directions (rows) and z_t = B k_t the latent coordinates a row's
// codes stand for, a score is <q, B^T z_t> = <B q, z_t>: the query is projected on the head's
// basis once per tile (one small score_rows call: coded x Dk per query), the tile's latent rows
// are decoded (codes x per-block (scale, min)) into scratch and scored there in `coded`
// dimensions instead of Dk. The basis is per head, so the projection cannot happen in
// prepare_query (which sees no head); it is made at a (b, h)'s first tile and kept per thread
// for the call's later tiles of the same head and queries (coded x Dk multiply-adds per query,
// about as much as scoring 40 rows, paid once instead of per tile). Values are the exact rows,
// read like the native cache's.
//
// When every coded channel has the same width of 2, 4 or 8 bits (xkv's layout), a row is one
// dense LSB-first stream of `coded` codes, and a block's rows are scored as integers
// (attention/narrow_plane_scores.h): the projected query folded into the block's per-channel
// scales and rounded to 16 bits, the mins (and <q, mean>) a per-query bias — no f32 decode.
#include <array>
#include <cstdint>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/narrow_plane_scores.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/svdq_layout.h"

namespace veloxquant {

class SvdqRows final : public attention::RowSource {
 public:
  // basis: [B, H, coded, D], or with leading_mean [B, H, 1 + coded, D] whose row 0 is the keys'
  // mean (xkv's centred basis): its score <q, mean> is added to every row's.
  SvdqRows(const lm::Tensor& codes, const lm::Tensor& params, const lm::Tensor& basis, const lm::Tensor& values,
           const SvdqLayout& layout, int64_t rows, int group, bool leading_mean = false);

  int64_t key_dim() const override { return layout_.dim; }
  int64_t value_dim() const override { return values_.dim; }
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  // The n_queries prepared queries projected on (b, h)'s table rows: [n_queries, 1 + coded] with a
  // leading mean, else [n_queries, coded]; and, on the integer path, the coded part in the rows'
  // padded code order [n_queries, plane.dim()] (zero at padding). Per thread, reused while the
  // call, head and queries are the same.
  struct Projection {
    const float* projected;
    const float* padded;
  };
  Projection project(int64_t b, int64_t h, const float* prepared, int64_t n_queries) const;
  // Block `block`'s f16 (scale, min) pairs widened into `pairs` and split into scale / min.
  void load_block_params(int64_t b, int64_t h, int64_t block, float* pairs, float* scale, float* min) const;
  // Rows [j0, j1) decoded to f32 latents, out[(j - j0) * coded + i], each with its block's params.
  void decode_span(int64_t b, int64_t h, int64_t j0, int64_t j1, float* pairs, float* scale, float* min,
                   float* out) const;

  const lm::Tensor& codes_;
  const lm::Tensor& params_;
  const lm::Tensor& basis_;
  attention::PlainRows values_;
  const SvdqLayout& layout_;
  int64_t rows_;
  int group_;
  bool leading_mean_;
  uint64_t call_;                          // distinct per object, so a thread's kept projection is never another call's
  attention::kernels::NarrowPlane plane_;  // padded > 0: the integer path
  bool fused_;                             // the float path scores decode steps from the codes
  int32_t limit_ = 0;
  // Padded code-order position -> coded channel (coded: a zero pair). Held inline: a SvdqRows is
  // built per call, and a vector would be a heap allocation per decode step. Planes wider than
  // this take the float path.
  static constexpr int64_t kMaxPlaneDim = 512;
  std::array<int32_t, kMaxPlaneDim> pair_of_;
};

}  // namespace veloxquant
