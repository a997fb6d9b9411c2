#pragma once
// snapkv (SnapKV, Li et al., arXiv 2404.14469; spec §6 #20): each prefill chunk's last
// snap_obs_window tokens vote (attention, summed over the window, average-pooled over 5
// neighbouring rows) for the rows to keep: sinks + window + the best-voted rest up to snap_budget.
// Decode steps add their attention to the votes and evict the lowest-voted row past the budget,
// the newest snap_obs_window rows kept (the original appended decode tokens without bound).
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

class SnapKVCache final : public eviction::EvictionCache {
 public:
  explicit SnapKVCache(const KVCacheConfig& config);
  std::shared_ptr<lm::KVCache> clone() const override { return clone_as(*this); }
};

// The original's construction errors (ValueError there, QuantizerConfigError here), each naming
// the field and its value.
void validate_snapkv_options(const KVCacheConfig& config);
eviction::EvictionPolicy snapkv_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_snapkv_cache(const KVCacheConfig& config);

// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor snapkv_method();

}  // namespace veloxquant
