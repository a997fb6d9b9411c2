#pragma once
// kivi (KIVI, Liu et al., ICML 2024, arXiv 2402.02750; spec §6 #8, §11.9): asymmetric min/max
// group quantization — keys per channel (a group = `group` consecutive tokens of one channel,
// because key outliers are channel-aligned), values per token (a group = `group` consecutive
// channels of one token). The newest tokens stay full precision in a residual window: the
// quantization frontier is floor(max(0, offset - residual_length) / group) * group, so keys are
// always flushed in whole token groups (issue #162 of the original).
//
// Storage (all of it counted by nbytes()):
//   key_codes_    U32 [B, H, cap, wk]          b-bit codes of each quantized token row (word layout)
//   key_params_   F16 [B, H, cap/group, 2*D]   (scale, min) pairs, per channel per token group
//   value_codes_  U32 [B, H, cap, wv]
//   value_params_ F16 [B, H, cap, 2*gv]        (scale, min) pairs, per token per channel group
//   residual_k_/residual_v_  input dtype [B, H, residual_length + group, D]  the full-precision tail
// The quantized region grows in 256-token steps (rounded up to whole groups).
//
// The same layout hosts KIVI's relatives (KiviVariant): kivi_sink keeps its sink rows exact
// (caches/sink_rows.h), kvquant adds sparse outliers (caches/sparse_outliers.h), fitted
// non-uniform levels (caches/fitted_levels.h) and first-position sinks. Their extra storage is
// counted by nbytes() and read by fused attention through caches/dense_and_sparse_rows.h.
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/caches/sink_rows.h"
#include "veloxquant/caches/sparse_outliers.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

struct WordPlaneKeys;  // caches/kivi_row_source.h

// What a KIVI-family method adds to KIVI's layout; the default is KIVI itself.
struct KiviVariant {
  std::string type_name = "KiviCache";  // what type_name() reports (prompt-cache restore)
  SinkRule sinks = SinkRule::kNone;
  int sink_slots = 0;
  double outlier_fraction = 0.0;  // 0: no sparse outliers
  int lloyd_iters = 0;            // 0: KIVI's uniform levels; > 0: levels fitted on the first flush
};

class KiviCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  KiviCache(int head_dim, int bits, int group_size, int residual_length, KiviVariant variant = {});

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return true; }
  // Rolls the frontier back to where a cache fed only the kept tokens would have it; token groups
  // that return to the full-precision window are restored from their codes (the originals are
  // not kept — that would cost the memory KIVI saves), so those rows carry their quantization
  // error. Quantized groups below the new frontier are bit-identical to the fresh cache's.
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return variant_.type_name; }
  std::shared_ptr<lm::KVCache> clone() const override;
  // Attends over the packed storage through the shared driver (kivi_row_source.h): keys scored
  // from their codes with the query folded into each token group's per-channel params, values
  // accumulated from their codes with group-scaled weights.
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  int bits() const { return bits_; }
  // The original exposes the average bits as assigned_avg_bits (never a public `bits`).
  double assigned_avg_bits() const { return bits_; }
  const KiviVariant& variant() const { return variant_; }
  const SinkRows& sinks() const { return sinks_; }
  // Fitted levels of (b, h): keys (which = 0) or values (1); nullptr while KIVI's uniform ones apply.
  const float* levels(int64_t b, int64_t h, int which) const;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_quantized_capacity(int64_t rows);
  // Quantizes `count` (a multiple of group_) rows of pending f32 data [B, H, P, D] starting at
  // pending row `first` into the quantized region at rows [frontier_, frontier_ + count). Sinks
  // are taken out of (and neutralized in) the pending data first.
  void flush(std::vector<float>& pending_k, std::vector<float>& pending_v, int64_t pending_rows, int64_t first,
             int64_t count);
  // flush()'s work for head (b, h): its `count` pending rows of keys [count, Dk] and values
  // [count, Dv] (sinks already neutralized); fit: this is the first flush of a fitted-levels variant.
  void flush_head(int64_t b, int64_t h, const float* keys, const float* values, int64_t count, bool fit);
  // The first flush of a variant with fitted levels: fits (b, h)'s key / value levels on the
  // normalized coordinates of the block about to be encoded.
  void fit_levels_for(int64_t b, int64_t h, const float* keys, const core::GroupParams* key_params, const float* values,
                      const core::GroupParams* value_params, int64_t rows);
  // Decodes quantized rows [begin, end) of (b, h) into f32 [end-begin, D]: the codes alone
  // (dense), or with the outlier deltas and exact sink rows (what a reader gets back).
  void decode_keys_dense(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  void decode_values_dense(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  void decode_keys(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  void decode_values(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  int head_dim_;
  int bits_;
  int group_;
  int residual_length_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0;
  int64_t frontier_ = 0;
  int64_t capacity_ = 0;  // quantized rows allocated
  lm::Tensor key_codes_, key_params_, value_codes_, value_params_, residual_k_, residual_v_;
  // How fused attention reads packed rows (built on first use; immutable, shared by clones), and
  // each key channel's position in that order (for the outliers' query lookups).
  std::shared_ptr<const attention::CodeOrder> key_order_, value_order_;
  std::shared_ptr<const std::vector<int32_t>> key_position_;  // natural key channel -> prepared position
  std::shared_ptr<const WordPlaneKeys> word_keys_;            // non-planar widths (kivi_row_source.h)
  KiviVariant variant_;
  SinkRows sinks_;
  SparseOutliers outliers_;
  lm::Tensor levels_;  // f32 [B, H, 2, 2^bits] when variant_.lloyd_iters > 0
  bool levels_fitted_ = false;
};

std::shared_ptr<lm::KVCache> make_kivi_cache(const KVCacheConfig& config);
// The registry row of "kivi" (registry/method_table.cpp lists it).
MethodDescriptor kivi_method();

}  // namespace veloxquant
