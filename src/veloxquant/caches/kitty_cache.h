#pragma once
// kitty (Kitty, dynamic channel-wise mixed precision, arXiv 2511.18643; spec §6 #11): key
// quantization error is dominated by a few high-variance channels, so those get more bits. Every
// block of kitty_group_size tokens of one (batch, kv head) ranks its key channels, when the block
// is complete, by their variance over the block's tokens; the n_hi = round(kitty_hi_fraction * Dk)
// most variable (ties to the lower channel) are quantized at kitty_hi_bit, the others at
// kitty_lo_bit — KIVI's per-channel group code over the block's G tokens in both cases (f16
// (scale, min) per channel). Values are kept in the input dtype, as in the original (keys only).
// The incomplete last block's keys stay in the input dtype.
//
// Storage (all counted by nbytes()), blocks and value rows allocated in 256-token steps:
//   hi_codes   U32 [B, H, blocks * G, words(n_hi, hi)]   the high channels of each row, ascending channel
//   lo_codes   U32 [B, H, blocks * G, words(n_lo, lo)]   the others, ascending channel
//   key_params F16 [B, H, blocks, 2 * Dk]                (scale, min) per channel, natural order
//   hi_mask    U32 [B, H, blocks, ceil(Dk / 32)]          bit c set: channel c is high in this block
//   values     input dtype [B, H, rows, Dv]               every row, exact
//   tail_k     input dtype [B, H, G, Dk]
// Fused attention reads it all as one segment of the shared driver (caches/kitty_key_rows.h).
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "Kitty").
struct KittyOptions {
  double kitty_hi_fraction = 0.25;
  int kitty_hi_bit = 4;
  int kitty_lo_bit = 2;
  int kitty_group_size = 32;
};

class KittyCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  KittyCache(double hi_fraction, int hi_bit, int lo_bit, int group_size);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable (the original rolls its statistics back): the frontier returns to where a cache fed
  // only the kept tokens has it. Key rows of a block that returns to the tail come back decoded
  // (the exact keys are not kept — that would cost the memory saved), values exactly. The
  // ranking is per block, so no running statistic outlives its block.
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "KittyCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  int64_t high_channels() const { return n_hi_; }
  // Whether key channel c of block `block` of (b, h) is high precision.
  bool is_high(int64_t b, int64_t h, int64_t block, int64_t c) const;
  // The original's average key bits: hi_fraction of the channels at hi_bit.
  double assigned_avg_bits() const;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_rows(int64_t rows);
  // Quantizes the G f32 key rows [G, Dk] of block `block` of (b, h).
  void flush_block(int64_t b, int64_t h, int64_t block, const float* keys);
  // Key rows of block `block` of (b, h) decoded into f32 [G, Dk].
  void decode_block(int64_t b, int64_t h, int64_t block, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  double hi_fraction_;
  int hi_bit_, lo_bit_, group_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0, n_hi_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_ = 0;  // capacity_: rows, a multiple of G
  lm::Tensor hi_codes_, lo_codes_, key_params_, hi_mask_, values_, tail_k_;
  // How fused attention unpacks each plane (immutable, shared by clones).
  std::shared_ptr<const attention::CodeOrder> hi_order_, lo_order_;
};

// QuantizerConfigError naming the field and value.
void validate_kitty_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_kitty_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor kitty_method();

}  // namespace veloxquant
