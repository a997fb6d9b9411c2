#pragma once
// amc (AMC, Hu et al. (Apple), preprint arXiv 2607.10109 — the spec's venue exception; spec §3.2
// "AMC", §6 #39): per-token mixed compression that never evicts. A token's saliency is the L1
// magnitude of its key; the most salient tokens keep everything, the next ones a third of their
// latent directions at 8 bits, the rest a sixteenth at 4 bits (amc_tiers.h).
//
// Every block of amc_group_size tokens of one (batch, kv head) is split, when it is complete, by
// saliency (descending, ties to the earlier token) into round(amc_k_high G) High rows,
// round(amc_k_mid G) Mid rows and the rest Low. High rows are stored as f16 keys and values.
// Mid and Low rows keep r latent coordinates of their key and of their value on the head's PCA
// bases (core/linalg.h, centred, fitted on the first flush's blocks — the prompt — and frozen;
// Low reads the first r_low of Mid's r_mid directions), quantized per token: an f16 (scale, min)
// per group of amc_group_size coordinates, codes packed densely. The incomplete last block stays
// in the input dtype.
//
// Storage (all counted by nbytes()), blocks allocated in 256-token steps, n_t rows per block of tier t:
//   High   keys F16 [B, H, blocks n_h, Dk]   values F16 [B, H, blocks n_h, Dv]
//   Mid/Low key_codes U8 [B, H, blocks n_t, ceil-per-8-group(r_k b / 8)]   key_params F16 [B, H, blocks n_t, 2 ceil(r_k
//   / G)]
//          value_codes / value_params the same with r_v (from Dv)
//   positions I32 [B, H, blocks n_t, 1] per tier (true positions, ascending per head)
//   tables F32 [B, H, 1 + r_mid, Dk] and [B, H, 1 + r_mid(Dv), Dv] (mean + directions), once fitted
//   tail_k / tail_v input dtype [B, H, G, D]
// Fused attention: each tier its own segment of the shared driver (amc_rows.h for Mid and Low:
// queries projected once per tile, values summed in latent space and mapped back once per tile),
// the tail as a fourth.
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/amc_tiers.h"
#include "veloxquant/caches/svdq_layout.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "AMC").
struct AmcOptions {
  double amc_k_high = 0.20;
  double amc_k_mid = 0.30;
  bool amc_use_query_saliency = false;
  double amc_query_alpha = 0.5;
  bool amc_adaptive_thresholds = false;
  int amc_threshold_window = 64;
  double amc_gamma = 0.1;
  std::optional<double> amc_calib_variance;  // required when amc_adaptive_thresholds is on
  int amc_group_size = 32;
};

class AmcCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  explicit AmcCache(const AmcOptions& options);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // NOT_TRIMMABLE as the original (spec §6 #39, the #83 test's not-trimmable group).
  bool is_trimmable() const override { return false; }
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "AmcCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  bool fitted() const { return fitted_; }
  int64_t rows_per_block(AmcTier tier) const { return tiers_[static_cast<std::size_t>(tier)].per_block; }
  // Tier of the token at `position` of (b, h) (only below the frontier), and its stored key/value.
  AmcTier tier_of(int64_t b, int64_t h, int64_t position) const;
  const lm::Tensor& key_table() const { return key_table_; }
  const lm::Tensor& value_table() const { return value_table_; }

 private:
  struct Tier {
    AmcTier kind = AmcTier::kHigh;
    int64_t per_block = 0;
    int bits = 16;
    SvdqLayout key_layout, value_layout;  // latent tiers only
    lm::Tensor k, kp, v, vp, pos;         // High: k, v, pos only
  };
  std::vector<lm::Tensor*> tier_tensors(Tier& t);
  std::vector<const lm::Tensor*> tier_tensors(const Tier& t) const;
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_blocks(int64_t blocks);
  void fit(int64_t b, int64_t h, const float* keys, const float* values, int64_t rows);
  void flush_block(int64_t b, int64_t h, int64_t block, const float* keys, const float* values);
  // Row `row` of tier t of (b, h) reconstructed: key into k [Dk], value into v [Dv].
  void decode_row(const Tier& t, int64_t b, int64_t h, int64_t row, float* k, float* v) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  AmcOptions options_;
  int64_t group_;
  std::array<Tier, 3> tiers_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_blocks_ = 0;
  bool fitted_ = false;
  lm::Tensor key_table_, value_table_, tail_k_, tail_v_;
};

// QuantizerConfigError naming the field and value; base::Unsupported for the two options this
// port does not implement (amc_use_query_saliency, amc_adaptive_thresholds).
void validate_amc_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_amc_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor amc_method();

}  // namespace veloxquant
