#include "veloxquant/eviction/methods/streaming_llm_cache.h"

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"

namespace veloxquant {

void validate_streaming_llm_options(const KVCacheConfig& config) {
  const StreamingLLMOptions& o = config.streaming_llm;
  if (o.stream_n_sink < 0) throw QuantizerConfigError("stream_n_sink must be >= 0, got " + std::to_string(o.stream_n_sink));
  if (o.stream_window_size < 1) {
    throw QuantizerConfigError("stream_window_size must be >= 1, got " + std::to_string(o.stream_window_size));
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy streaming_llm_policy(const KVCacheConfig& config) {
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kRecentWindow;
  p.n_sink = config.streaming_llm.stream_n_sink;
  p.budget = config.streaming_llm.stream_n_sink + config.streaming_llm.stream_window_size;
  return p;
}

StreamingLLMCache::StreamingLLMCache(const KVCacheConfig& config)
    : EvictionCache("StreamingLLMCache", (validate_streaming_llm_options(config), streaming_llm_policy(config)),
                    eviction::storage_of(config), eviction::scoring_of(config)) {}

std::shared_ptr<lm::KVCache> make_streaming_llm_cache(const KVCacheConfig& config) {
  return std::make_shared<StreamingLLMCache>(config);
}

}  // namespace veloxquant
