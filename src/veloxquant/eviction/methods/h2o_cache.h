#pragma once
// h2o (H2O, Zhang et al., arXiv 2306.14048; spec §6 #22): heavy hitters by accumulated attention.
// Each step every live row's score becomes score * h2o_decay + its attention weight; over the
// budget the lowest-scored row is evicted, except the sinks and the newest h2o_grace rows (the
// original's additions: decay and grace).
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

class H2OCache final : public eviction::EvictionCache {
 public:
  explicit H2OCache(const KVCacheConfig& config);
  std::shared_ptr<lm::KVCache> clone() const override { return clone_as(*this); }
};

// The original's construction errors (ValueError there, QuantizerConfigError here), each naming
// the field and its value.
void validate_h2o_options(const KVCacheConfig& config);
eviction::EvictionPolicy h2o_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_h2o_cache(const KVCacheConfig& config);

// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor h2o_method();

}  // namespace veloxquant
