#pragma once
// A standalone cache whose keys are the codes of one quant::Quantizer (turboquant_mse,
// turboquant_prod, qjl, polar): a key slot is exactly quantizer.code_bytes() bytes (the code is
// the memory), attend() prepares the query once and scores every slot from its codes
// (quantizer.score), values int8 per token (StandaloneCacheBase).
//
// Outlier two-stream mode (standalone TurboQuant, spec §2.4; `enable_outlier_two_stream`):
// the first `n_calib_tokens` keys (200 when unset) are encoded whole while their per-channel
// mean |k| is accumulated; then the `n_outlier_channels` strongest channels are fixed, and every
// later key stores those channels in int8 (per-token f16 scale) and goes to the quantizer with
// them zeroed, so a few large channels no longer inflate the norm every other coordinate is
// quantized against. score = quantizer score + sum over outlier channels of q_c * k_c. A slot
// then holds code_bytes + n_outlier_channels + 2 bytes (an all-zero outlier part for the whole-
// encoded calibration keys).
#include <memory>

#include "veloxquant/caches/standalone_cache_base.h"
#include "veloxquant/quant/quantizer.h"

namespace veloxquant {

class QuantizerStandaloneCache : public StandaloneCacheBase {
 public:
  QuantizerStandaloneCache(const KVCacheConfig& config, std::unique_ptr<quant::Quantizer> quantizer,
                           bool outlier_two_stream = false);

  const quant::Quantizer& quantizer() const { return *quantizer_; }
  // The outlier channels once calibrated (ascending), else empty.
  const std::vector<int>& outlier_channels() const { return outliers_; }
  // The decoded key in `slot` (tests).
  std::vector<float> decode_key(int64_t slot) const;

 protected:
  void encode_key(const float* key, int64_t slot) override;
  void score_keys(const float* query, const std::vector<SlotRange>& ranges, float* out) const override;
  std::size_t extra_bytes() const override;

 private:
  std::unique_ptr<quant::Quantizer> quantizer_;
  int n_outliers_ = 0;        // 0: plain mode
  int64_t calib_tokens_ = 0;  // keys observed before the outlier channels are fixed
  int64_t observed_ = 0;
  std::vector<double> channel_abs_sum_;
  std::vector<int> outliers_;
};

}  // namespace veloxquant
