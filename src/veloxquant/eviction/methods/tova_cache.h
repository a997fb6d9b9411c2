#pragma once
// tova (TOVA, Oren et al., "Transformers are Multi-State RNNs", arXiv 2401.06104; spec §6 #23):
// memoryless — over the budget, evict the row with the lowest attention weight of the current
// step (sinks kept).
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

class TovaCache final : public eviction::EvictionCache {
 public:
  explicit TovaCache(const KVCacheConfig& config);
  std::shared_ptr<lm::KVCache> clone() const override { return clone_as(*this); }
};

// The original's construction errors (ValueError there, QuantizerConfigError here), each naming
// the field and its value.
void validate_tova_options(const KVCacheConfig& config);
eviction::EvictionPolicy tova_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_tova_cache(const KVCacheConfig& config);

// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor tova_method();

}  // namespace veloxquant
