#include "veloxquant/eviction/methods/streaming_llm_cache.h"

#include "veloxquant/errors.h"
#include <algorithm>
#include <string>

#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

void validate_streaming_llm_options(const KVCacheConfig& config) {
  const StreamingLLMOptions& o = config.streaming_llm;
  if (o.stream_n_sink < 0)
    throw QuantizerConfigError("stream_n_sink must be >= 0, got " + std::to_string(o.stream_n_sink));
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

MethodDescriptor streaming_llm_method() {
  MethodDescriptor m = eviction::eviction_method("streaming_llm", "StreamingLLMCache");
  m.make_restorable = [] { return std::make_shared<StreamingLLMCache>(KVCacheConfig{}); };
  m.blurb =
      "Attention sinks (first stream_n_sink positions) + a FIFO of the newest stream_window_size tokens; "
      "positions preserved";
  m.paper = "Efficient Streaming Language Models with Attention Sinks (Xiao et al., ICLR 2024, arXiv 2309.17453)";
  m.deviations = std::string(
                     "Rows allocated once for n_sink + window_size; explicit mask once rows are "
                     "non-contiguous.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("stream_n_sink", &KVCacheConfig::streaming_llm, &StreamingLLMOptions::stream_n_sink,
                   "First positions never evicted (attention sinks)", 0),
      option_field("stream_window_size", &KVCacheConfig::streaming_llm, &StreamingLLMOptions::stream_window_size,
                   "Newest tokens kept besides the sinks", 1),
  };
  m.validate = validate_streaming_llm_options;
  m.make_serving = make_streaming_llm_cache;
  // The window is what is left of the budget after the sinks (at least one row).
  m.set_budget = [](KVCacheConfig& c, int budget) {
    c.streaming_llm.stream_n_sink = std::min(c.streaming_llm.stream_n_sink, budget - 1);
    c.streaming_llm.stream_window_size = budget - c.streaming_llm.stream_n_sink;
  };
  return m;
}

}  // namespace veloxquant
