#pragma once
// xkv (xKV: Cross-Layer SVD for KV-Cache Compression, Chang et al., arXiv 2503.18893; spec §3.2,
// §4.3 "xKV", §6 #28): the dominant singular vectors of the keys line up across adjacent layers,
// so one SVD basis serves a group of xkv_group_size contiguous attention layers. Keys only;
// values stay in the input dtype.
//
// Per layer (a group member), per (batch, kv head):
//   prefill  the first call's keys are published to the group's XkvCoordinator (fan-in). When the
//            last member has published, the first basis() call runs one joint SVD over the
//            stacked, centred keys (xkv_basis.h) and memoizes it; every member keeps the same
//            shared object (never a copy) and never asks again.
//   pending  keys not yet coded wait in the input dtype: member 0's prefill waits until the group's
//            basis exists (its next call), afterwards at most G - 1 rows (G = xkv_group_quant_size).
//   blocks   every complete block of G tokens: z = V_g (k - mean) per token, each of the `coded`
//            latent channels group-quantized over the block's G tokens at xkv_latent_bits (KIVI's
//            per-channel code, core/group_quant.h: f16 scale and min per channel and block).
//
// Storage (all allocated, counted by nbytes()), blocks and value rows in 256-token steps:
//   codes    U8  [B, H, rows, row_bytes]          row_bytes = sum over 8-channel groups of ceil(n b / 8)
//   params   F16 [B, H, blocks, 2 * coded]
//   values   input dtype [B, H, rows, Dv]
//   pending  input dtype [B, H, max(G, waiting rows), Dk]
//   basis    XkvBasis (F32 [B, H, 1 + coded, Dk] + I32 [B, H, 1, 1]) — held once per group and
//            counted once: by the member whose basis() call ran the SVD (the group's last member),
//            0 in the others; a cache restored alone, or fitting alone, owns (and counts) its own.
// Fused attention: the blocks through SvdqRows with its leading mean row (the query projected once per tile on the mean
// and the directions), the pending rows as the native cache's.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/svdq_layout.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/cross_layer/xkv_coordinator.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "xKV").
struct XkvOptions {
  int xkv_group_size = 2;
  std::optional<int> xkv_rank;  // None: the energy threshold decides
  double xkv_energy_threshold = 0.95;
  int xkv_latent_bits = 4;
  int xkv_group_quant_size = 32;
  int xkv_max_ctx = 8192;
};

// A layer's place in its group: contiguous groups of xkv_group_size attention layers, a trailing
// partial group smaller (the original's pair_layers_grouped).
struct XkvRole {
  int group_id = 0;
  int member = 0;
  int n_members = 1;
};
std::vector<XkvRole> xkv_roles(std::size_t n_attention_layers, int group_size);

class XkvCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // Without a coordinator the cache fits its own basis on its first call (group size 1).
  explicit XkvCache(const XkvOptions& options, XkvRole role = {},
                    std::shared_ptr<XkvCoordinator> coordinator = nullptr);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // The original is accounting-only and not trimmable (spec §6 #28).
  bool is_trimmable() const override { return false; }
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "XkvCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  const XkvRole& role() const { return role_; }
  int64_t frontier() const { return frontier_; }
  // The shared basis (null until the group's SVD ran) and whether this cache counts its bytes.
  const std::shared_ptr<const XkvBasis>& basis() const { return basis_; }
  bool counts_basis() const { return owns_basis_; }
  const SvdqLayout& layout() const { return layout_; }
  // Key row j of (b, h) as stored: decoded from the codes below the frontier, else pending.
  std::vector<float> key_row(int64_t b, int64_t h, int64_t j) const;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void acquire_basis();
  void adopt_basis(std::shared_ptr<const XkvBasis> basis, bool owns);
  void flush();
  void ensure_code_rows(int64_t rows);
  void decode_block(int64_t b, int64_t h, int64_t block, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  XkvOptions options_;
  XkvRole role_;
  std::shared_ptr<XkvCoordinator> coordinator_;
  std::shared_ptr<const XkvBasis> basis_;
  bool owns_basis_ = false, published_ = false;
  SvdqLayout layout_;
  int group_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, value_capacity_ = 0, code_capacity_ = 0, pending_capacity_ = 0;
  lm::Tensor codes_, params_, values_, pending_;
};

// QuantizerConfigError naming the field and value.
void validate_xkv_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_xkv_cache(const KVCacheConfig& config);
// The registration (registry/cross_layer_method_rows.cpp lists it).
MethodDescriptor xkv_method();

}  // namespace veloxquant
