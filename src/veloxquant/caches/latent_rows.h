#pragma once
// The stored state of one side (keys or values) of a true-latent cache (caches/latent_cache.h)
// and the attention driver's view of it.
//
// A layer's H kv heads fall into G head groups of H / G heads; a token's rows of the heads of a
// group, concatenated, are one `width` = (H / G) x D vector x. Per (batch, group) the side keeps
// a PCA basis fitted on the first rows: mean mu and the first r components U (r x width, unit
// rows), and each token as the code row of its latent z = U (x - mu) (the codec's format).
//
// Attention in the latent space (Palu's "reconstruction on the fly", without the fp16 copy):
//   score   <q_h, k> = <U_h q_h, z> + <q_h, mu_h>, U_h the head's D columns of U. The second term
//           is the same for every row of a query, so softmax ignores it: the query is projected
//           once per call (project_queries) and the rows are scored in r dimensions.
//   values  out_h = sum_j w_j (U_h^T z_j + mu_h) = U_h^T (sum_j w_j z_j) + mu_h for normalised
//           weights: the driver accumulates latents (LatentRows::accumulate_tile) and each output
//           row is reconstructed once per call (reconstruct_outputs).
#include <cstdint>
#include <memory>

#include "lm/tensor.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/latent_codec.h"

namespace veloxquant {

struct LatentSide {
  int64_t dim = 0, width = 0, max_rank = 0;
  lm::Tensor basis;  // F32 [B, G, max_rank, width]; rows past a group's rank are zero
  lm::Tensor mean;   // F32 [B, G, 1, width]
  lm::Tensor ranks;  // I32 [B, G, 1, 1]
  lm::Tensor codes;  // U8  [B, G, capacity, row_bytes]
  std::unique_ptr<LatentCodec> codec;

  int64_t rank(int64_t b, int64_t g) const;
  const float* basis_row(int64_t b, int64_t g, int64_t i) const;
  const float* mean_row(int64_t b, int64_t g) const;
  const uint8_t* code_row(int64_t b, int64_t g, int64_t j) const;
  int64_t row_stride() const { return codes.dim(3); }
};

// Latent rows [0, rows) of both sides; kv head h reads group h / heads_per_group. key_dim() and
// value_dim() are the sides' max ranks: the call's queries are the projected ones and its
// outputs the accumulated latents.
//
// Plane path. When both sides' codecs store every group's rows as group-affine parts the SIMD
// plane decoder reads (LatentCodec::plane_rows: palu), a tile is decoded once into plane order
// (attention/affine_part_planes.h: a few vector ops per 8 codes, each part's scale applied, its
// (scale, min) pairs after the codes) and scored / accumulated there by the shared f32 tile
// kernels. Queries and outputs are then in plane order too: key_dim() and value_dim() are the
// largest plane widths, queries_to_planes lays the projected queries out (each part's query sum
// at its min's slot, so the dot product adds min_p * sum q), and latents_from_planes brings the
// accumulated rows back to latents (code position plus the part's weighted min sum).
class LatentRows final : public attention::RowSource {
 public:
  LatentRows(const LatentSide& keys, const LatentSide& values, int64_t heads_per_group, int64_t rows);
  int64_t key_dim() const override;
  int64_t value_dim() const override { return planes_ ? value_width_ : values_.max_rank; }
  bool planes() const { return planes_; }
  // Integer key paths (kvtc): the keys are scored from their codes, so the call's queries are
  // the projected ones prepared by queries_to_codes (key_dim() floats each). With the codec's
  // integer_keys option: attention/code_row_scores.h's 16-bit layout for code rows of
  // code_stride() codes (VNNI). Otherwise, where the AMX key scores run and every group's key
  // rows are bit-field codes (LatentCodec::code_values on the key side):
  // attention/code_key_scores.h's 22-bit layout.
  bool integer_keys() const { return code_stride_ > 0 || amx_key_stride_ > 0; }
  int64_t code_stride() const { return code_stride_; }
  void queries_to_codes(const float* projected, int64_t batch, int64_t q_heads, int64_t n, float* out) const;
  // projected [B, Hq, N, keys.max_rank] -> out [B, Hq, N, key_dim()], query head qh in group
  // qh / (Hq / G).
  void queries_to_planes(const float* projected, int64_t batch, int64_t q_heads, int64_t n, float* out) const;
  // acc [B, Hq, N, value_dim()] (normalised) -> latents [B, Hq, N, values.max_rank].
  void latents_from_planes(const float* acc, int64_t batch, int64_t q_heads, int64_t n, float* latents) const;
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  const LatentSide& keys_;
  const LatentSide& values_;
  int64_t heads_per_group_, rows_;
  bool planes_ = false;
  int64_t key_width_ = 0, value_width_ = 0;
  int64_t code_stride_ = 0;  // > 0: integer key path (the codec's option, 16 bits)
  // > 0: the key rows are scored from their codes on AMX (attention/code_key_scores.h), decoded
  // to bytes this many per row.
  int64_t amx_key_stride_ = 0;
  bool pair_tiles_ = false;  // the pair-tile key scorer runs directly here (attention/latent_pair_tiles.h)
  // > 0: the value rows are summed from their integer codes (attention/code_value_sums.h, AMX),
  // decoded to bytes this many per row.
  int64_t value_code_stride_ = 0;
};

// queries f32 [B, Hq, N, D] contiguous -> projected [B, Hq, N, keys.max_rank] (zeros past the
// group's rank): U_h q for the kv head h = query head / (Hq / H).
void project_queries(const LatentSide& keys, int64_t kv_heads, int64_t heads_per_group, const float* queries,
                     int64_t batch, int64_t q_heads, int64_t n, float* projected);
// latents [B, Hq, N, values.max_rank] (normalised sums of latents) -> out [B, Hq, N, Dv]:
// U_h^T a + mu_h.
void reconstruct_outputs(const LatentSide& values, int64_t kv_heads, int64_t heads_per_group, const float* latents,
                         int64_t batch, int64_t q_heads, int64_t n, float* out);

}  // namespace veloxquant
