#pragma once
// streaming_llm (StreamingLLM, Xiao et al., ICLR 2024, arXiv 2309.17453; spec §6 #21): the first
// stream_n_sink positions (attention sinks) plus a FIFO of the newest stream_window_size tokens,
// original positions kept (no renumbering). No scores: budget = n_sink + window_size rows.
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

class StreamingLLMCache final : public eviction::EvictionCache {
 public:
  explicit StreamingLLMCache(const KVCacheConfig& config);
  std::shared_ptr<lm::KVCache> clone() const override { return clone_as(*this); }
};

// The original's construction errors (ValueError there, QuantizerConfigError here), each naming
// the field and its value.
void validate_streaming_llm_options(const KVCacheConfig& config);
eviction::EvictionPolicy streaming_llm_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_streaming_llm_cache(const KVCacheConfig& config);

// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor streaming_llm_method();

}  // namespace veloxquant
