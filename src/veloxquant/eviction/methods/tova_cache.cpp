#include "veloxquant/eviction/methods/tova_cache.h"

#include "veloxquant/eviction/eviction_config.h"

namespace veloxquant {

void validate_tova_options(const KVCacheConfig& config) {
  eviction::require_evictable("tova_budget", config.tova.tova_budget, "tova_n_sink", config.tova.tova_n_sink);
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy tova_policy(const KVCacheConfig& config) {
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAttentionScored;
  p.budget = config.tova.tova_budget;
  p.n_sink = config.tova.tova_n_sink;
  p.accumulate = false;  // memoryless: only the current step's weights count
  return p;
}

TovaCache::TovaCache(const KVCacheConfig& config)
    : EvictionCache("TovaCache", (validate_tova_options(config), tova_policy(config)), eviction::storage_of(config),
                    eviction::scoring_of(config)) {}

std::shared_ptr<lm::KVCache> make_tova_cache(const KVCacheConfig& config) { return std::make_shared<TovaCache>(config); }

}  // namespace veloxquant
