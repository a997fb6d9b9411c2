#include "veloxquant/eviction/methods/pyramidkv_cache.h"

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"

namespace veloxquant {

void validate_pyramidkv_options(const KVCacheConfig& config) {
  const PyramidKVOptions& o = config.pyramidkv;
  if (!(o.pyramid_beta >= 1.0)) {
    throw QuantizerConfigError("pyramid_beta must be >= 1.0, got " + std::to_string(o.pyramid_beta));
  }
  if (o.pyramid_backend != "auto" && o.pyramid_backend != "mlx" && o.pyramid_backend != "metal" &&
      o.pyramid_backend != "reference") {
    throw QuantizerConfigError("pyramid_backend must be one of reference, mlx, metal, auto, got '" + o.pyramid_backend +
                               "'");
  }
  if (o.pyramid_grace < 0) throw QuantizerConfigError("pyramid_grace must be >= 0, got " + std::to_string(o.pyramid_grace));
  eviction::require_evictable("pyramid_budget", o.pyramid_budget, "pyramid_n_sink", o.pyramid_n_sink);
  if (o.pyramid_resolved_budget) {
    eviction::require_evictable("pyramid_resolved_budget", *o.pyramid_resolved_budget, "pyramid_n_sink",
                                o.pyramid_n_sink);
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy pyramidkv_policy(const KVCacheConfig& config) {
  const PyramidKVOptions& o = config.pyramidkv;
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAttentionScored;
  p.budget = o.pyramid_resolved_budget.value_or(o.pyramid_budget);
  p.n_sink = o.pyramid_n_sink;
  p.protect_recent = o.pyramid_grace;  // limited per layer by EvictionPolicy::effective_protect
  return p;
}

PyramidKVCache::PyramidKVCache(const KVCacheConfig& config)
    : EvictionCache("PyramidKVCache", (validate_pyramidkv_options(config), pyramidkv_policy(config)),
                    eviction::storage_of(config), eviction::scoring_of(config)) {}

std::shared_ptr<lm::KVCache> make_pyramidkv_cache(const KVCacheConfig& config) {
  return std::make_shared<PyramidKVCache>(config);
}

}  // namespace veloxquant
