#pragma once
// cachegen (CacheGen, Liu et al., SIGCOMM 2024, arXiv 2310.07240; spec §6 #16): KIVI-style group
// quantization, the integer codes of each block expressed as deltas against the block's first
// (anchor) token, then entropy coded for real with a static rANS coder (core/rans_coder.h), at a
// per-layer bit width that falls with depth (for_model: cachegen_layer_groups groups of layers,
// group k at max(2, cachegen_bits - k), injected as cachegen_resolved_bits).
//
// Per (batch, kv head), every complete block of G = cachegen_group_size tokens is group-quantized
// at the layer's bits: keys per channel over the block's G tokens (Dk f16 (scale, min) pairs) when
// cachegen_per_channel, else per token in channel groups of G; values always per token in channel
// groups of G. The incomplete last block's keys and values wait in [B, H, G, D] tails in the input
// dtype.
//
// Resident form (what attention reads; nbytes() counts it, as allocated, rows in 256-row steps
// rounded up to whole blocks): KIVI's layout (caches/kivi_cache.h), so attention scores and
// accumulates straight from the packed codes through KIVI's row source at a fixed cost per row:
//   key_codes    U32 [B, H, cap, packed_words(Dk, bits)]   value_codes U32 [B, H, cap, ...(Dv)]
//   key_params   F16 [B, H, cap / G, 2 Dk] (per channel) or [B, H, cap, 2 ceil(Dk / G)] (per token)
//   value_params F16 [B, H, cap, 2 ceil(Dv / G)]
// Stream form (state(), CacheGen's bitstream; storage() measures it): per block, head and side a
// record [f16 (scale, min) pairs][u16 frequency table, 2^bits entries, sum 4096][rANS bytes] of the
// G * D symbols, row-major (token, channel); with cachegen_use_delta, symbol (t, c) = (code(t, c) -
// code(0, c)) mod 2^bits for t > 0 and code(0, c) for the anchor row — lossless. Records back to
// back in one byte arena, block-major (block 0 of every head, keys then values, then block 1, ...);
// offsets [n + 1] (u32) give record i = (block * B * H + b * H + h) * 2 + kv as bytes
// [offsets[i], offsets[i + 1]). from_state() decodes every record back to the resident form.
// Entropy coding stays in the stream form because a rANS stream decodes only sequentially (about
// 24 instructions per symbol, 68% of a decode step when attention read it: 0.09x the native
// cache), and on real KV it saves little against the packed codes (see the card).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/core/group_quant.h"
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

// What the stream form's records hold, summed over the cache (recomputed by coding every block).
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
  // Trimmable: whole blocks above the new frontier are dropped, and the block that reopens comes
  // back to the tails decoded from its codes (the exact rows are not kept), so the cache then
  // equals one fed the kept rows as they were decoded.
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
  // Block (block, b, h, kv = 0 keys / 1 values) decoded from its resident codes into f32 [G, D];
  // `codes`, when set, receives its G * D integer codes.
  void decode_record(int64_t block, int64_t b, int64_t h, int kv, float* out, uint8_t* codes = nullptr) const;

  static constexpr int64_t kGrowthStep = 256;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_rows(int64_t rows);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  // The block's codes [G, D] and params into the resident tensors at block `block` of (b, h).
  void put_block(int64_t block, int64_t b, int64_t h, int kv, const uint8_t* codes, const core::GroupParams* params);
  // Its params (param_pairs of them) out of the resident tensors.
  void get_params(int64_t block, int64_t b, int64_t h, int kv, core::GroupParams* params) const;
  // The stream record of block (block, b, h, kv), appended to `out`; returns its payload bytes.
  std::size_t encode_record(int64_t block, int64_t b, int64_t h, int kv, std::vector<uint8_t>& out) const;
  lm::KeysValues fetch(lm::DType dtype) const;
  std::size_t pairs(int kv) const;

  int bits_, group_;
  bool use_delta_, per_channel_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_ = 0;
  lm::Tensor key_codes_, key_params_, value_codes_, value_params_, tail_k_, tail_v_;
  std::shared_ptr<const attention::CodeOrder> key_order_, value_order_;  // how KIVI's rows read the codes

  friend class CachegenRows;
};

// QuantizerConfigError naming the field and value.
void validate_cachegen_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_cachegen_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor cachegen_method();

}  // namespace veloxquant
