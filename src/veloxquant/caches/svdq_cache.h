#pragma once
// svdq (SVDq, "1.25-bit and 410x key cache compression for LLM attention", Hong et al., 2025,
// arXiv 2502.15304; spec §6 #10): keys are projected on a latent basis fitted by SVD on the keys
// themselves, so their energy concentrates in the first latent channels, and the latent channels
// are quantized with a width that falls with their significance — svdq_bit_schedule gives the 8
// equal channel groups (8, 4, 2, 1, 1, 0, 0, 0) bits by default, 2 bits per key element on
// average, the last three groups dropped. Values are kept in the input dtype (key compression, as
// the paper and the original).
//
// Per (batch, kv head):
//   basis   the right singular vectors of the keys of the first flush (every complete block of
//           svdq_group_size tokens of the first call that has one — the prompt), completed to an
//           orthonormal basis (caches/svdq_basis.h), frozen; latent channels past svdq_rank (or
//           the svdq_energy_threshold rank) are dropped.
//   blocks  every complete block of G tokens: z = B k per token, then KIVI's per-channel group
//           code over the block's G tokens for each coded latent channel at its group's width.
//   tail    the incomplete last block's keys, in the input dtype.
//
// Storage (all counted by nbytes()), blocks and value rows allocated in 256-token steps:
//   codes   U8  [B, H, blocks * G, row bytes]   dense codes of the coded channels (svdq_layout.h)
//   params  F16 [B, H, blocks, 2 * coded]       (scale, min) per coded channel and block
//   basis   F32 [B, H, coded, Dk]               latent directions of the coded channels (0 past the rank)
//   ranks   I32 [B, H, 1, 1]
//   values  input dtype [B, H, rows, Dv]        every row, exact
//   tail_k  input dtype [B, H, G, Dk]
// Fused attention: the quantized blocks as one segment (svdq_rows.h: the query projected on the
// basis per tile, scored against the latent rows), the tail as a second.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/svdq_layout.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "SVDq"); the schedule is written "8,4,2,1,1,0,0,0".
struct SvdqOptions {
  std::optional<int> svdq_rank;  // None: the energy threshold decides
  double svdq_energy_threshold = 0.95;
  std::string svdq_bit_schedule = "8,4,2,1,1,0,0,0";
  int svdq_group_size = 32;
};

class SvdqCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  explicit SvdqCache(const SvdqOptions& options);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable: the frontier returns to a block edge and the reopened block's keys come back
  // decoded (as kitty). The basis stays as fitted unless the trim empties the cache: a cache fed
  // only the kept tokens fits the same basis when the kept tokens still cover the first flush.
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "SvdqCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  bool fitted() const { return fitted_; }
  const SvdqLayout& layout() const { return layout_; }
  // Latent channels kept for (b, h) (0 before the basis is fitted).
  int64_t rank(int64_t b, int64_t h) const;
  // Latent direction of coded channel i of (b, h): Dk floats.
  const float* basis_row(int64_t b, int64_t h, int64_t i) const;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_rows(int64_t rows);
  void fit(int64_t b, int64_t h, const float* keys, int64_t rows);
  void flush_block(int64_t b, int64_t h, int64_t block, const float* keys);
  void decode_block(int64_t b, int64_t h, int64_t block, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  SvdqOptions options_;
  std::vector<int> schedule_;
  int group_;
  SvdqLayout layout_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_ = 0;
  bool fitted_ = false;
  lm::Tensor codes_, params_, basis_, ranks_, values_, tail_k_;
};

// QuantizerConfigError naming the field and value.
void validate_svdq_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_svdq_cache(const KVCacheConfig& config);
MethodDescriptor svdq_method();

}  // namespace veloxquant
