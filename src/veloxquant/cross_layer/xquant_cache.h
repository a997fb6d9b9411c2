#pragma once
// xquant (XQuant, Yang et al., EMNLP 2025, arXiv 2510.11236; spec §4.3, §6 #13): layers are
// grouped (cross_layer/layer_roles.h); the group's anchor group-quantizes K and V along the
// token axis (cross_layer/token_group_quant.h, xquant_base_bits) and publishes its codes; each
// reuse layer takes the anchor's codes for the same tokens and stores only its own per-group
// (scale, min) fitted to its own data, plus, when xquant_residual_bits > 0, its residual
// quantized the same way. A cache built alone is the degenerate anchor (no coordinator).
//
// Token groups are aligned to absolute positions: rows [k*G, (k+1)*G) form group k and are
// quantized when complete; the last incomplete group (< G rows) stays in the input dtype. (The
// original quantizes each call's tokens as one segment padded to whole groups, so a 1-token
// decode step is a group of one row whose fp32 min is the value itself.) One call's newly
// completed groups form one block, published as the segment (group_id, first row).
//
// Memory (nbytes, each byte counted once across the layers of one for_model list):
//   anchor  codes (U32 word layout, base_bits) of K and V — owned, shared read-only with the
//           reuse layers through shared_ptr, counted by the anchor only;
//           params F32 [B, H, rows/G, 2*D] (scale, min) per K and V;
//   reuse   its own params (same shape) + residual codes (U32, residual_bits) and params;
//           anchor codes it only references are not counted (it counts codes it had to make
//           itself: no segment published, e.g. after a prompt-cache load);
//   both    the full-precision tail [B, H, G, D] in the input dtype for K and V.
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/cross_layer/layer_roles.h"
#include "veloxquant/cross_layer/segment_coordinator.h"

namespace veloxquant {

// One call's anchor codes for its newly completed token groups; immutable once published.
struct XQuantCodes {
  lm::Tensor key_codes;    // U32 [B, H, rows, packed_words(D_k, base_bits)]
  lm::Tensor value_codes;  // U32 [B, H, rows, packed_words(D_v, base_bits)]
};
using XQuantCoordinator = cross_layer::SegmentCoordinator<XQuantCodes>;

class XQuantRows;
struct XQuantCodeOrders;

class XQuantCache : public lm::KVCache {
 public:
  // role.leader = anchor. coordinator null: a cache alone (anchor) or a reuse layer whose
  // anchor is not there (it then quantizes its own codes).
  // wiring_id: the for_model call's id (cross_layer/wiring_registry.h), saved in meta_state so
  // a loaded list finds one coordinator again; 0 = not wired.
  XQuantCache(int base_bits, int residual_bits, int group, cross_layer::LayerRole role = {},
              std::shared_ptr<XQuantCoordinator> coordinator = nullptr, uint64_t wiring_id = 0);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  // Stores the step's rows, then attends over every stored row through the shared driver
  // (cross_layer/xquant_rows.h): keys scored and values accumulated straight from the codes,
  // never the whole cache decoded into a tensor per step as update_and_fetch must.
  // Calls of more than this many queries (prefill) attend over the fetched rows instead.
  static constexpr int64_t kFusedMaxQueries = 16;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return true; }
  // Whole groups below the new frontier stay bit-identical; rows of a group that returns to
  // the full-precision tail are restored from their codes (the originals are not kept), so
  // they carry their quantization error (as KiviCache::trim).
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "XQuantCache"; }
  // Deep copy of what this cache owns; anchor codes a reuse layer references stay shared
  // (immutable). The copy publishes to / reads from the same coordinator.
  std::shared_ptr<lm::KVCache> clone() const override;
  friend class XQuantRows;

  bool is_anchor() const { return role_.leader; }
  const cross_layer::LayerRole& role() const { return role_; }
  int64_t frontier() const { return frontier_; }
  // Rows quantized with the anchor's codes / with codes this cache had to make itself.
  int64_t reused_rows() const;

 private:
  struct Block {
    std::shared_ptr<const XQuantCodes> codes;
    bool owns_codes = false;
    int64_t token_start = 0, rows = 0;                    // rows in use (a trim may shorten the last block)
    lm::Tensor key_params, value_params;                  // F32 [B, H, groups, 2*D]
    lm::Tensor key_residual_codes, value_residual_codes;  // reuse with residual_bits > 0
    lm::Tensor key_residual_params, value_residual_params;
  };
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  // Quantizes the first `rows` pending rows (f32 [B*H, pending_rows, D]) into a new block.
  Block make_block(const std::vector<float>& pk, const std::vector<float>& pv, int64_t pending_rows, int64_t rows);
  // Decodes the block's rows of (b, h), keys or values, into out [block.rows, D].
  void decode_block(const Block& block, int64_t b, int64_t h, bool keys, float* out) const;
  // Rows [first, first + n) of the block, into out [n, D]; codes and residual: the caller's
  // scratch of n * D each.
  void decode_rows(const Block& block, int64_t b, int64_t h, bool keys, int64_t first, int64_t n, float* out,
                   uint8_t* codes, float* residual) const;
  lm::KeysValues fetch(lm::DType dtype) const;
  // std::byte pointer to row 0 of (b, h) of a tail buffer.
  std::byte* tail_row0(lm::Tensor& tail, int64_t bh, int64_t width);
  const std::byte* tail_row0(const lm::Tensor& tail, int64_t bh, int64_t width) const;
  bool has_residual() const { return !role_.leader && residual_bits_ > 0; }

  int base_bits_, residual_bits_, group_;
  cross_layer::LayerRole role_;
  std::shared_ptr<XQuantCoordinator> coordinator_;
  uint64_t wiring_id_ = 0;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0;
  std::vector<Block> blocks_;
  lm::Tensor tail_k_, tail_v_;  // input dtype [B, H, G, D]
  // The orders the fused rows read codes in, built with the head dims (immutable, shared by clones).
  std::shared_ptr<const XQuantCodeOrders> orders_;
};

std::shared_ptr<lm::KVCache> make_xquant_cache(const KVCacheConfig& config);

}  // namespace veloxquant
