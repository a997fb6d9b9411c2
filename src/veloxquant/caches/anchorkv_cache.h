#pragma once
// anchorkv (AnchorKV, Khalaf et al., Technion, preprint arXiv 2608.02901 — spec "venue exception";
// spec §6 row 41). Per kv head, a few tokens are anchors, stored exact; every other token is one
// anchor index and one coefficient (k ~ c * anchor); the tokens where that costs attention most
// also get a low-bit residual, within a byte budget. The spec gives only the row and the fields;
// our reading of them (docs/methods/anchorkv.md):
//
//   * the newest anchorkv_window rows wait exact; the rows that leave it (a spill: a prefill's
//     worth at once, one row per decode step) are compressed together;
//   * anchors: after a spill, a head holds ceil(anchorkv_anchor_frac * compressed rows) anchors
//     (at least 1). The new ones come from the spill: round(anchorkv_rho * new) with the most
//     key-as-query attention mass (caches/kaq_mass.h, the window's keys as queries), the rest
//     uniform samples of the remaining spilled rows (core::Rng, anchorkv_seed, the spill's first
//     position and the head);
//   * every other spilled key (value) picks the anchor key (value) of largest projection
//     |<x, a>| / |a| and keeps c = <x, a> / |a|^2 (f16): index and coefficient, separately for
//     keys and values;
//   * residuals: utility = KaQ mass * (|r_k|^2 + |r_v|^2) with r = x - c a; the spilled rows of
//     highest utility get an anchorkv_residual_bits per-row min/scale code of r_k and r_v while
//     all residuals of the head fit in anchorkv_theta of the f16 bytes of its compressed rows.
//
// Storage (all counted by nbytes()), compressed rows / anchors / residual slots in 256 / 16 / 64-row steps:
//   anchor_k/anchor_v  input dtype [B, H, anchors, D]
//   anchor_pos         I32 [B, H, anchors, 1]  the position each anchor came from
//   records            U32 [B, H, rows, 3]   key anchor | key coef (f16) << 16, the same for the
//                                            value, residual slot (0xFFFFFFFF = none)
//   residual_codes     U8  [B, H, slots, (Dk + Dv) * bits / 8]
//   residual_params    F16 [B, H, slots, 4]  key min, key step, value min, value step
//   tail_k/tail_v      input dtype [B, H, window, D]
// Attention (fused, one RowSource of the shared driver): the query's dot products with the
// anchors are computed once per head and call and each row scores c * <q, a> (+ <q, residual>);
// value weights are gathered per anchor and the anchors' values added once per tile.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "AnchorKV").
struct AnchorKvOptions {
  double anchorkv_theta = 0.05;
  int anchorkv_window = 32;
  double anchorkv_rho = 0.7;
  double anchorkv_anchor_frac = 1.0 / 128.0;
  int anchorkv_residual_bits = 2;
  int anchorkv_seed = 42;
};

class AnchorKvCache : public lm::KVCache {
 public:
  // Allocation steps: records grow 256 rows at a time, anchors (1/128 of the rows by default) 16,
  // residual slots 64.
  static constexpr int64_t kGrowthStep = 256, kAnchorStep = 16, kSlotStep = 64;
  static constexpr uint32_t kNoResidual = 0xFFFFFFFFu;
  // Throws QuantizerConfigError naming the field for unsupported settings.
  explicit AnchorKvCache(const AnchorKvOptions& options);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return false; }  // anchors and budgets depend on every spill
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "AnchorKvCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t compressed_rows() const { return rows_; }
  int64_t anchors() const { return anchors_; }
  int64_t residual_slots() const { return slots_; }
  // One compressed row's record and its key / value as stored (f32), for tests.
  struct Record {
    uint16_t key_anchor, value_anchor;
    float key_coef, value_coef;
    uint32_t slot;
  };
  Record record(int64_t b, int64_t h, int64_t j) const;
  void reconstruct(int64_t b, int64_t h, int64_t j, float* key, float* value) const;
  // Anchor a of (b, h) (exact, f32) and the position it came from.
  int32_t anchor_position(int64_t b, int64_t h, int64_t a) const;

  const AnchorKvOptions& options() const { return o_; }

 private:
  friend class AnchorKvRows;
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void compress(int64_t b, int64_t h, const float* k, const float* v, int64_t spill, const float* proxies,
                int64_t n_proxies, int64_t new_anchors, int64_t new_slots, int64_t slot_base);
  lm::KeysValues fetch_with(const lm::Tensor& keys, const lm::Tensor& values) const;
  int64_t residual_row_bytes() const;

  AnchorKvOptions o_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, rows_ = 0, anchors_ = 0, slots_ = 0;
  int64_t row_cap_ = 0, anchor_cap_ = 0, slot_cap_ = 0;
  int64_t offset_rows_at_ = 0;  // position of the first row of the spill being compressed
  lm::Tensor anchor_k_, anchor_v_, anchor_pos_, records_, residual_codes_, residual_params_, tail_k_, tail_v_;
};

// A residual code of n elements (bits each, packed low bits first) with its f16 (min, step).
void anchorkv_decode_residual(const uint8_t* codes, const uint16_t* params, int64_t n, int bits, float* out);
// QuantizerConfigError naming the field and value.
void validate_anchorkv_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_anchorkv_cache(const KVCacheConfig& config);
MethodDescriptor anchorkv_method();

}  // namespace veloxquant
