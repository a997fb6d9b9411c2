#pragma once
// skvq (SKVQ, sliding-window KV cache quantization, Duanmu et al., COLM 2024, arXiv 2405.06219;
// spec §6 #31): keys and values quantized per token at very low widths, made to hold by
//   - channel reorder: each head's channels sorted by range so a quantization group holds
//     channels of similar range (frozen from the first flushed block, per (batch, kv head));
//   - clipped dynamic quantization: each group's range shrunk by a clip factor searched per
//     group (caches/skvq_codes.h);
//   - a full-precision sliding window of the most recent tokens and the first skvq_n_sink
//     tokens ("attention sinks") kept in the input dtype.
//
// Positions of one (batch, kv head):
//   [0, n_sink)                    sinks, input dtype
//   [n_sink, frontier)             quantized rows, frontier = n_sink + quantized
//   [frontier, offset)             the window, input dtype, between window and window + 31 rows
// Rows leave the window in blocks of kFlushRows: when it holds window + kFlushRows rows its
// oldest kFlushRows are quantized (KIVI's residual rule), so quantized = kFlushRows *
// floor(max(0, offset - n_sink - window) / kFlushRows) — a function of the offset alone, the
// same however the tokens were chunked. The first block flushed (positions [n_sink, n_sink + 32))
// fixes each head's key and value channel orders.
//
// Storage (all counted by nbytes()), code rows in 256-row steps, sinks and window in 256-row
// steps up to their size:
//   sink_k / sink_v        input dtype [B, H, <= n_sink, Dk / Dv]
//   window_k / window_v    input dtype [B, H, <= window + 32, Dk / Dv]
//   key_codes              u32 [B, H, cap, words(Dk, bits_key) + groups(Dk)]   (skvq_codes.h layout)
//   value_codes            u32 [B, H, cap, words(Dv, bits_value) + groups(Dv)]
//   key_order / value_order i32 [B, H, 1, Dk / Dv]   stored position p holds channel order[p]
// Fused attention: sinks, quantized rows (caches/skvq_rows.h) and window as three segments of
// the shared driver.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/skvq_codes.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "SKVQ").
struct SkvqOptions {
  int skvq_bits_key = 2;
  int skvq_bits_value = 2;
  int skvq_group_size = 32;
  int skvq_window = 128;
  int skvq_n_sink = 5;
  bool skvq_reorder = true;
  bool skvq_clip_search = true;
  double skvq_clip_alpha = 1.0;
  int skvq_max_ctx = 8192;
};

class SkvqCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  static constexpr int64_t kFlushRows = 32;
  // Throws QuantizerConfigError naming the field for an option out of range.
  explicit SkvqCache(const SkvqOptions& options);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable: the frontier returns to where a cache fed only the kept tokens has it. A trim
  // that stays inside the current flush block is exact; quantized rows a deeper trim hands back
  // to the window come back decoded (the exact rows are not kept — that would cost the memory
  // saved). A trim that empties the quantized region unfreezes the channel orders.
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "SkvqCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  // Rows quantized for a cache holding `offset` tokens (the rule above).
  static int64_t quantized_rows_for(int64_t offset, int64_t n_sink, int64_t window);
  int64_t quantized_rows() const { return quantized_; }
  int64_t frontier() const { return options_.skvq_n_sink + quantized_; }
  int64_t window_rows() const { return std::max<int64_t>(0, offset_ - frontier()); }
  int64_t sink_rows() const { return std::min<int64_t>(offset_, options_.skvq_n_sink); }
  // Whether the channel orders are frozen (a block has been flushed with reorder on).
  bool ordered() const { return ordered_; }
  // Stored position p of head (b, h) holds channel key_order(b, h)[p] (natural order before
  // the first flush and without reorder).
  const int32_t* key_order(int64_t b, int64_t h) const;
  const int32_t* value_order(int64_t b, int64_t h) const;
  // The original's average widths, for reports (no public `bits`: spec §2.1).
  double assigned_avg_bits() const { return 0.5 * (options_.skvq_bits_key + options_.skvq_bits_value); }

 private:
  void allocate(int64_t batch, int64_t heads, int64_t dk, int64_t dv, lm::DType dtype);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_code_rows(int64_t rows);
  void ensure_window_rows(int64_t rows);
  void ensure_sink_rows(int64_t rows);
  // Quantizes the window's oldest kFlushRows rows (fixing the orders first when not yet frozen).
  void flush();
  // Quantized row q of (b, h) decoded into natural channel order.
  void decode_key(int64_t b, int64_t h, int64_t q, float* out) const;
  void decode_value(int64_t b, int64_t h, int64_t q, float* out) const;
  void reset_orders();
  lm::KeysValues fetch(lm::DType dtype) const;

  SkvqOptions options_;
  skvq::CodeLayout key_layout_, value_layout_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, quantized_ = 0, capacity_ = 0;
  bool ordered_ = false;
  lm::Tensor sink_k_, sink_v_, window_k_, window_v_, key_codes_, value_codes_, key_order_, value_order_;
};

// QuantizerConfigError naming the field and value.
void validate_skvq_options(const SkvqOptions& options);
void validate_skvq_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_skvq_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor skvq_method();

}  // namespace veloxquant
