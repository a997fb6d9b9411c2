#pragma once
// adakv (Ada-KV, Feng et al., arXiv 2407.11550, as the original's "AdaKV-proxy"; spec §6 #12):
// the paper splits a layer's eviction budget unevenly over its heads; the original turns that
// into per-head *bit widths* on top of KIVI. Every (batch, kv head) gets a width in
// {lo, mid, hi} per block of adakv_group_size (G) tokens, so that the mean width over the
// layer's heads is as close to adakv_target_avg_bits as possible without exceeding it.
//
// Allocation of block k (docs/methods/adakv.md has the rule in full):
//   counts: (n_hi, n_mid, n_lo) with n_hi + n_mid + n_lo = H maximizing the bit sum S <= T * H
//           (ties: fewer hi heads); fixed per layer, so every block costs the same bytes;
//   importance of a head: the variance of its key L2 norms over the blocks k - ceil(W / G) + 1
//           .. k (W = adakv_obs_window), from per-block (sum, sum of squares) of the norms;
//   ranking: larger variance first (the original's sign, the paper's inverted), ties to the
//           lower head; the first n_hi heads get hi, the next n_mid mid, the rest lo;
//   blocks with k % adakv_update_interval != 0 keep block k - k % interval's widths.
// Keys: KIVI's per-channel group code over the block's G tokens at the head's width; values:
// KIVI's per-token code over channel groups of G at the same width. As in KIVI the newest tokens
// stay in the input dtype: the frontier is floor(max(0, offset - R) / G) * G
// (R = adakv_residual_length), so the tail holds at most R + G - 1 rows.
//
// Storage (all counted by nbytes()), rows allocated in 256-token steps of whole blocks. The
// heads of one block always split n_t per tier t (hi, mid, lo), so each tier's codes get their
// own planes with n_t slots; a head's slot in block k is its rank among the block's heads of
// the same tier (ascending head index):
//   key_codes[t]   U32 [B, n_t, rows, words(Dk, bits_t)]
//   value_codes[t] U32 [B, n_t, rows, words(Dv, bits_t)]
//   key_params     F16 [B, H, blocks, 2 * Dk]            (scale, min) per channel
//   value_params   F16 [B, H, rows, 2 * ceil(Dv / G)]    (scale, min) per token channel group
//   tiers          U8  [B, H, blocks, 1]                 the head's tier (0 hi, 1 mid, 2 lo)
//   norm_stats     F32 [B, H, blocks, 2]                 the block's key-norm sum, sum of squares
//   tail_k, tail_v input dtype [B, H, R + G, D]
// Fused attention decodes 64-row tiles of codes into scratch (caches/adakv_rows.h).
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "AdaKV-proxy").
struct AdaKVOptions {
  double adakv_target_avg_bits = 2.5;
  int adakv_lo_bit = 2;
  int adakv_mid_bit = 3;
  int adakv_hi_bit = 4;
  int adakv_group_size = 32;
  int adakv_update_interval = 1;
  std::string adakv_importance = "norm_variance";
  int adakv_obs_window = 32;
  // Not in the original's field table: it builds on KIVI and keeps KIVI's full-precision window
  // of the newest residual_length (128) tokens; this names that inherited setting.
  int adakv_residual_length = 128;
};

// How many of `heads` heads get hi, mid and lo bits: the largest bit sum not above
// target * heads, ties to fewer hi heads. Exposed for the tests and the card.
std::array<int64_t, 3> adakv_tier_counts(int64_t heads, double target, int lo, int mid, int hi);

struct AdaKVLayouts;  // caches/adakv_rows.h

class AdaKVCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // Throws QuantizerConfigError naming the field on a bad option.
  explicit AdaKVCache(const AdaKVOptions& options);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable: the frontier returns to where a cache fed only the kept tokens has it; the
  // running statistics are per block, so dropping the blocks rolls them back. A block that
  // returns to the tail comes back decoded from its codes (keys and values).
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "AdaKVCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  // Bits of block `block` of (b, h).
  int width(int64_t b, int64_t h, int64_t block) const;
  // The layer's mean bits per head (the same for every block; the target until the first flush).
  double assigned_avg_bits() const;
  const AdaKVOptions& options() const { return options_; }

 private:
  friend class AdaKVRows;
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_rows(int64_t rows);
  // Flushes block `block` of batch b: keys / values f32 [H, G, D] of every head.
  void flush_block(int64_t b, int64_t block, const float* keys, const float* values);
  // Tier slot of (b, h) in block `block`.
  int64_t slot(int64_t b, int64_t h, int64_t block) const;
  int tier(int64_t b, int64_t h, int64_t block) const;
  // Rows [r0, r1) of one block of (b, h) decoded into f32 [r1 - r0, D].
  void decode_keys(int64_t b, int64_t h, int64_t r0, int64_t r1, float* out) const;
  void decode_values(int64_t b, int64_t h, int64_t r0, int64_t r1, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;
  // Where the frontier stands for `offset` tokens.
  int64_t frontier_for(int64_t offset) const;

  AdaKVOptions options_;
  std::array<int, 3> bits_{};  // hi, mid, lo
  std::array<int64_t, 3> counts_{};
  int group_;
  int64_t residual_ = 0, tail_rows_ = 0;  // R, and the tail's rows per head (R + G)
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0, value_groups_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_ = 0;  // capacity_: rows, a multiple of G
  std::array<lm::Tensor, 3> key_codes_, value_codes_;
  lm::Tensor key_params_, value_params_, tiers_, norm_stats_, tail_k_, tail_v_;
  // How fused attention reads each tier (caches/adakv_rows.h), built on the first call.
  std::shared_ptr<const AdaKVLayouts> layouts_;
};

void validate_adakv_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_adakv_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor adakv_method();

}  // namespace veloxquant
