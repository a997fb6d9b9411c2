#pragma once
// zipcache (ZipCache, He et al., NeurIPS 2024, arXiv 2405.14256; spec §6 #19, adapted): per-token
// mixed precision. Tokens the model leans on get more bits; ZipCache ranks them by a saliency
// estimate, the original (and this cache) by key L2 norm, per head.
//
// Every block of zipcache_group_size tokens of one (batch, kv head) is split, when it is complete,
// into two precision tiers: its n_hi = round(zipcache_hi_fraction * G) rows of largest key norm
// (ties to the earlier position) and the other G - n_hi. Each tier is stored exactly as KIVI
// stores a group (caches/kivi_cache.h, core/group_quant.h): keys per channel over the tier's rows
// of the block, values per token over channel groups of G, b-bit codes in the word layout, f16
// (scale, min) — at zipcache_hi_bits for the high tier and zipcache_lo_bits for the low one. The
// incomplete last block stays in the input dtype (at most G - 1 rows after a call).
//
// Storage (all counted by nbytes()), per tier t with n_t rows per block, blocks allocated in
// 256-token steps:
//   key_codes    U32 [B, H, blocks * n_t, words(Dk, b_t)]   value_codes U32 [B, H, blocks * n_t, words(Dv, b_t)]
//   key_params   F16 [B, H, blocks, 2 * Dk]                 value_params F16 [B, H, blocks * n_t, 2 * ceil(Dv / G)]
//   positions    I32 [B, H, blocks * n_t, 1]  (the rows' true positions, ascending per head)
//   tail_k/tail_v  input dtype [B, H, G, D]
// Fused attention reads each tier as its own segment of the shared driver (KiviQuantizedRows with
// the tier's positions): scores and sums straight from the codes, never a dequantized copy.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "ZipCache").
struct ZipCacheOptions {
  int zipcache_hi_bits = 4;
  int zipcache_lo_bits = 2;
  double zipcache_hi_fraction = 0.20;
  int zipcache_group_size = 32;
  bool zipcache_quantize_values = true;
};

class ZipCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  ZipCache(int hi_bits, int lo_bits, double hi_fraction, int group_size);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // The original is accounting-only and not trimmable (spec §6 #19); trim removes nothing.
  bool is_trimmable() const override { return false; }
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "ZipCacheCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  // Rows per block of the high (0) and low (1) tier.
  int64_t rows_per_block(int tier) const { return tiers_[static_cast<std::size_t>(tier)].per_block; }
  int64_t frontier() const { return frontier_; }
  // The original's reported average bits: hi_fraction of the tokens at hi_bits.
  double assigned_avg_bits() const;

 private:
  struct Tier {
    int bits = 0;
    int64_t per_block = 0;
    lm::Tensor key_codes, key_params, value_codes, value_params, positions;
    std::shared_ptr<const attention::CodeOrder> key_order, value_order;
  };
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_blocks(int64_t blocks);
  // Quantizes block `block` (G rows of f32 keys [G, Dk] / values [G, Dv]) of (b, h) into the tiers.
  void flush_block(int64_t b, int64_t h, int64_t block, const float* keys, const float* values);
  // Decodes every quantized row of (b, h) into out[position * D] (keys, then values).
  void decode_quantized(int64_t b, int64_t h, float* keys, float* values) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  int hi_bits_, lo_bits_, group_;
  double hi_fraction_;
  std::array<Tier, 2> tiers_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_blocks_ = 0;
  lm::Tensor tail_k_, tail_v_;
};

// QuantizerConfigError naming the field and value; base::Unsupported for zipcache_quantize_values=false.
void validate_zipcache_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_zipcache_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor zipcache_method();

}  // namespace veloxquant
