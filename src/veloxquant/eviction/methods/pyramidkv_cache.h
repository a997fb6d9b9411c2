#pragma once
// pyramidkv (PyramidKV, Cai et al., arXiv 2406.02069; spec §6 #24, §4.3): the H2O scorer (no
// decay; the newest pyramid_grace rows kept, new here) with a per-layer budget that tapers
// linearly from shallow to deep layers, the mean held at pyramid_budget
// (eviction/pyramid_schedule.h). for_model injects each layer's budget as
// pyramid_resolved_budget; a cache built alone uses pyramid_budget.
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

class PyramidKVCache final : public eviction::EvictionCache {
 public:
  explicit PyramidKVCache(const KVCacheConfig& config);
  std::shared_ptr<lm::KVCache> clone() const override { return clone_as(*this); }
};

// The original's construction errors (ValueError there, QuantizerConfigError here), each naming
// the field and its value.
void validate_pyramidkv_options(const KVCacheConfig& config);
eviction::EvictionPolicy pyramidkv_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_pyramidkv_cache(const KVCacheConfig& config);

// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor pyramidkv_method();

}  // namespace veloxquant
