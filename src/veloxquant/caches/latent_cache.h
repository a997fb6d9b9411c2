#pragma once
// The cache behind the two "true latent" methods (spec §6 rows 15 and 36: palu, kvtc): K and V
// live only as per-token latent codes in a PCA basis fitted on the layer's first rows; the
// method supplies the rank rule and the row format (caches/latent_codec.h).
//
// Life of a layer's cache:
//   before the fit  rows are kept as given ([B, H, cap, D] in the input dtype) until the cache
//                   holds kMinFitRows tokens, or the codec's min_fit_rows (kvtc: 4 per dimension;
//                   the prefill normally brings them in one call): a basis fitted on a handful
//                   of tokens would span only them.
//   the fit         per (batch, head group): linalg::pca (centred) of the group's concatenated
//                   rows (caches/latent_rows.h) — the first whole multiple of kMinFitRows rows,
//                   so that trimming a few rows does not change the fit —, the codec's rank and
//                   format, then every stored
//                   row is coded and the raw rows are freed. The basis is frozen from then on.
//   after the fit   every new token is projected and coded at once (no tail: codes are per token,
//                   so trim is exact — the rows simply end earlier).
// Storage (all counted by nbytes()), codes grown in 256-row steps:
//   per side  codes U8 [B, G, cap, row bytes], basis F32 [B, G, r_max, G_w], mean F32 [B, G, 1,
//             G_w], ranks I32 [B, G, 1, 1] and the codec's fitted tensors (G_w = (H / G) x D).
// Fused attention: scores and value sums in the latent space (caches/latent_rows.h) through the
// shared driver; before the fit, plain attention over the raw rows; for a codec that opts in
// (kvtc), a call with many queries (a prefill chunk) rebuilds the rows once (as update_and_fetch returns them) and
// attends over them as plain rows, cheaper there than every query head reading the whole latent.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/latent_codec.h"
#include "veloxquant/caches/latent_rows.h"

namespace veloxquant {

class LatentCache : public lm::KVCache {
 public:
  static constexpr int64_t kMinFitRows = 64;
  static constexpr int64_t kGrowthStep = 256;

  // n_head_groups: the number of head groups asked for; a layer of H kv heads uses the largest
  // divisor of H that is <= it (palu's 4 on 3 heads: 3 groups of one head).
  LatentCache(std::string type_name, int n_head_groups, std::unique_ptr<LatentCodec> key_codec,
              std::unique_ptr<LatentCodec> value_codec);
  LatentCache(const LatentCache& other);
  LatentCache& operator=(const LatentCache& other);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return type_name_; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  bool fitted() const { return fitted_; }
  int64_t head_groups() const { return groups_; }
  const LatentSide& keys_side() const { return k_; }
  const LatentSide& values_side() const { return v_; }
  // Whether a fused call of n queries per head (after the fit) attends over the rebuilt rows
  // instead of in the latent space: a prefill chunk, never a decode step.
  bool rebuild_rows_for(int64_t q_heads, int64_t n) const;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void fit();
  void fit_side(LatentSide& side, const std::vector<float>& rows, int64_t n, int64_t fit_rows);
  void encode_rows(LatentSide& side, const float* rows, int64_t n, int64_t first_row) const;
  void encode_token_range(LatentSide& side, const float* rows, int64_t n, int64_t first_row, int64_t b, int64_t g,
                          int64_t t0, int64_t t1) const;
  void ensure_code_rows(int64_t rows);
  lm::KeysValues fetch(lm::DType dtype) const;
  // Rows [0, offset) of both sides rebuilt as mu + U^T z into f32 [B, H, >= offset, D].
  void reconstruct_sides(lm::Tensor& keys, lm::Tensor& values) const;
  void reconstruct_block(const LatentSide& side, lm::Tensor& out, int64_t b, int64_t g, int64_t t0) const;
  static constexpr int64_t kRebuildBlock = 64;

  std::string type_name_;
  std::string fused_who_;  // "<type>::fused_attention", built once (no allocation per step)
  int requested_groups_;
  int64_t batch_ = 0, heads_ = 0, groups_ = 0, heads_per_group_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, capacity_ = 0;
  bool fitted_ = false;
  lm::Tensor raw_k_, raw_v_;
  LatentSide k_, v_;
  std::vector<float> projected_, latent_out_;     // fused-attention scratch (grow-only)
  std::vector<float> plane_queries_, plane_out_;  // the same in LatentRows' plane order
};

}  // namespace veloxquant
