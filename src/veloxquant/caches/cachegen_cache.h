#pragma once
// cachegen (CacheGen, Liu et al., SIGCOMM 2024, arXiv 2310.07240; spec §6 #16): KIVI-style group
// quantization, the integer codes of each block expressed as deltas against the block's first
// (anchor) token, then entropy coded for real with a static rANS coder (core/rans_coder.h), at a
// per-layer bit width that falls with depth (for_model: cachegen_layer_groups groups of layers,
// group k at max(2, cachegen_bits - k), injected as cachegen_resolved_bits).
//
// Per (batch, kv head), every complete block of G = cachegen_group_size tokens becomes two records
// (keys, values). A record is
//   params  f16 (scale, min) pairs: keys per channel over the block's G tokens (Dk pairs) when
//           cachegen_per_channel, else per token in channel groups of G (G * ceil(Dk / G) pairs);
//           values always per token in channel groups of G (G * ceil(Dv / G) pairs)
//   freqs   u16 [2^bits]   the rANS frequency table of this record's symbols (sum 4096)
//   bytes   the rANS stream of the G * D symbols, row-major (token, channel); with
//           cachegen_use_delta, symbol (t, c) = (code(t, c) - code(0, c)) mod 2^bits for t > 0
//           and code(0, c) for the anchor row — lossless, so reconstruction is exactly the group
//           quantizer's.
// Records live back to back in one byte arena, block-major (block 0 of every head, keys then
// values, then block 1, ...), so trimming whole blocks truncates the arena. offsets [n + 1] (u32)
// gives record i's bytes as [offsets[i], offsets[i + 1]), i = (block * B * H + b * H + h) * 2 + kv.
// The incomplete last block's keys and values wait in [B, H, G, D] tails in the input dtype.
// nbytes() = arena + offsets + tails, as allocated (the arena grows by 5/4, the offsets double).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "CacheGen").
struct CachegenOptions {
  int cachegen_bits = 4;
  int cachegen_group_size = 32;
  bool cachegen_use_delta = true;
  bool cachegen_per_channel = true;
  int cachegen_layer_groups = 3;
  std::optional<int> cachegen_resolved_bits;  // injected per layer by for_model
};

// The spec's layer schedule (§4, `layer_group_bits`): g = min(groups, n); bounds[k] =
// round_half_even(n * k / g) for k = 0..g, the last forced to n; a layer in group k (bounds[k] <=
// layer < bounds[k + 1]) gets max(2, base_bits - k). One entry per attention layer.
std::vector<int> cachegen_layer_bits(int n_layers, int groups, int base_bits);

// What the stored records hold, summed over the cache (recomputed by decoding every record).
struct CachegenStorage {
  std::size_t records = 0;
  std::size_t symbols = 0;        // G * D per record
  std::size_t param_bytes = 0;    // f16 (scale, min) pairs
  std::size_t table_bytes = 0;    // rANS frequency tables
  std::size_t payload_bytes = 0;  // rANS streams
  double entropy_bits = 0;        // order-0 entropy of each record's symbols, summed
  std::size_t packed_bytes = 0;   // the same codes bit-packed at `bits` (no entropy coding)
};

class CachegenCache : public lm::KVCache {
 public:
  CachegenCache(int bits, int group_size, bool use_delta, bool per_channel);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable: whole blocks above the new frontier are dropped (the arena is truncated), and the
  // block that reopens comes back to the tails decoded from its codes (the exact rows are not
  // kept), so the cache then equals one fed the kept rows as they were decoded.
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "CachegenCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int bits() const { return bits_; }
  int64_t frontier() const { return frontier_; }
  CachegenStorage storage() const;
  // Record (block, b, h, kv = 0 keys / 1 values) decoded into f32 [G, D]; `codes`, when set,
  // receives its G * D integer codes (after undoing the delta).
  void decode_record(int64_t block, int64_t b, int64_t h, int kv, float* out, uint8_t* codes = nullptr) const;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void append_record(const float* x, int64_t dim, bool per_channel);
  lm::KeysValues fetch(lm::DType dtype) const;
  std::size_t record_index(int64_t block, int64_t b, int64_t h, int kv) const {
    return static_cast<std::size_t>(((block * batch_ + b) * heads_ + h) * 2 + kv);
  }

  int bits_, group_;
  bool use_delta_, per_channel_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0;
  std::size_t arena_used_ = 0, n_offsets_ = 0;
  lm::Tensor arena_, offsets_, tail_k_, tail_v_;

  friend class CachegenRows;
};

// QuantizerConfigError naming the field and value.
void validate_cachegen_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_cachegen_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor cachegen_method();

}  // namespace veloxquant
