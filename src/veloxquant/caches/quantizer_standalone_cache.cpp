#include "veloxquant/caches/quantizer_standalone_cache.h"

namespace veloxquant {

QuantizerStandaloneCache::QuantizerStandaloneCache(const KVCacheConfig& config,
                                                   std::unique_ptr<quant::Quantizer> quantizer)
    : StandaloneCacheBase(config, quantizer->code_bytes()), quantizer_(std::move(quantizer)) {}

void QuantizerStandaloneCache::encode_key(const float* key, int64_t slot) {
  quantizer_->encode(key, 1, key_slot(slot));
}

void QuantizerStandaloneCache::score_keys(const float* query, const std::vector<SlotRange>& ranges, float* out) const {
  const quant::PreparedQuery prepared = quantizer_->prepare_query(query);  // once per attend
  for (const SlotRange& range : ranges) {
    quantizer_->score(prepared, key_slot(range.first), static_cast<std::size_t>(range.count), out);
    out += range.count;
  }
}

std::vector<float> QuantizerStandaloneCache::decode_key(int64_t slot) const {
  std::vector<float> out(static_cast<std::size_t>(dim_));
  quantizer_->decode(key_slot(slot), 1, out.data());
  return out;
}

}  // namespace veloxquant
