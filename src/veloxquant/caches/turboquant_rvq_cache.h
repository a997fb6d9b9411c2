#pragma once
// turboquant_rvq — the default method (spec §2.2): each key is unit-normalised (norm floored at
// 1e-4, kept in bf16 so norms above 65504 stay finite), rotated, and encoded in two stages of b
// bits each (Gaussian/Beta Lloyd-Max, then Laplacian Lloyd-Max on the residual) by
// quant::TurboQuantRvq; the two index streams are packed LSB-first (byte-identical to the
// original's uint32 word layout for b in {1, 2, 4, 8}). Key bytes per vector as the original
// accounts them: ceil(2*d*b/8) + 2.
//
// Storage (all counted by nbytes(); grown in 256-token steps, mlx_lm's KVCache rule):
//   packed1_, packed2_  U8   [B, H, cap, ceil(d*b/8)]   stage-1 / stage-2 index streams
//   norms_              BF16 [B, H, cap, 1]
//   values_             input dtype [B, H, cap, Dv]               when rvq_value_bits == 0
//   value_codes_/value_params_  U32 [B,H,cap,wv] / F16 [B,H,cap,2*groups]   when 2..8 (group 32)
//
// update_and_fetch returns dequantized keys for every row in the input dtype (the contract).
// fused_attention instead attends through the shared driver (turboquant_rvq_row_source.h): the
// query is rotated once per head and call, each tile's codes become centroid sums in registers
// scored by every query head of the GQA group — no dequantized copy of the key cache is built.
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/quant/turboquant_rvq.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

class TurboQuantRvqCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  static constexpr int kValueGroup = 32;
  TurboQuantRvqCache(int head_dim, int bits, int64_t seed, int value_bits = 0,
                     quant::RvqStage2Scale stage2 = quant::RvqStage2Scale::kMatched);
  ~TurboQuantRvqCache() override;
  // Copies share the tensors' storage (clone() deep-copies them); from_state() moves a rebuilt
  // cache into place, so the move is declared next to the destructor.
  TurboQuantRvqCache(const TurboQuantRvqCache&);
  TurboQuantRvqCache& operator=(const TurboQuantRvqCache&);
  TurboQuantRvqCache(TurboQuantRvqCache&&) noexcept;
  TurboQuantRvqCache& operator=(TurboQuantRvqCache&&) noexcept;

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return !packed1_.defined(); }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "TurboQuantRvqCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  // The original's telemetry (never a public `bits`: mlx_lm would take it for its own kernel).
  int assigned_bits() const { return bits_; }
  int value_bits() const { return value_bits_; }
  // Telemetry of the tokens held (a trim rolls them back exactly: they follow offset).
  int64_t compressed_key_bytes() const;  // ceil(2*d*b/8)+2 per vector
  int64_t fp16_key_bytes() const;        // H*B*T*D*2

 private:
  void ensure_capacity(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void allocate_rows(int64_t capacity, int64_t keep);
  void decode_key_row(int64_t b, int64_t h, int64_t row, float* out) const;
  void decode_value_row(int64_t b, int64_t h, int64_t row, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  int head_dim_;
  int bits_;
  int64_t seed_;
  int value_bits_;
  quant::RvqStage2Scale stage2_;
  std::shared_ptr<const quant::TurboQuantRvq> quantizer_;  // immutable: clones share it
  int64_t batch_ = 0, heads_ = 0, dv_ = 0, stream_bytes_ = 0;
  lm::DType value_dtype_ = lm::DType::F16;
  int64_t offset_ = 0;
  int64_t capacity_ = 0;
  lm::Tensor packed1_, packed2_, norms_, values_, value_codes_, value_params_;
  // How fused attention reads packed rows (built on first use; immutable, shared by clones).
  std::shared_ptr<const attention::CodeOrder> key_order_, value_order_;
};

std::shared_ptr<lm::KVCache> make_turboquant_rvq_cache(const KVCacheConfig& config);

// The registry row of "turboquant_rvq" (caches/turboquant_rvq_method.cpp).
MethodDescriptor turboquant_rvq_method();

}  // namespace veloxquant
