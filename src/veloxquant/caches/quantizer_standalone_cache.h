#pragma once
// A standalone cache whose keys are the codes of one quant::Quantizer (turboquant_mse,
// turboquant_prod, qjl, polar): a key slot is exactly quantizer.code_bytes() bytes (the code is
// the memory), attend() prepares the query once and scores every slot from its codes
// (quantizer.score), values int8 per token (StandaloneCacheBase).
#include <memory>

#include "veloxquant/caches/standalone_cache_base.h"
#include "veloxquant/quant/quantizer.h"

namespace veloxquant {

class QuantizerStandaloneCache : public StandaloneCacheBase {
 public:
  QuantizerStandaloneCache(const KVCacheConfig& config, std::unique_ptr<quant::Quantizer> quantizer);

  const quant::Quantizer& quantizer() const { return *quantizer_; }
  // The decoded key in `slot` (tests).
  std::vector<float> decode_key(int64_t slot) const;

 protected:
  void encode_key(const float* key, int64_t slot) override;
  void score_keys(const float* query, const std::vector<SlotRange>& ranges, float* out) const override;

 private:
  std::unique_ptr<quant::Quantizer> quantizer_;
};

}  // namespace veloxquant
