#include "veloxquant/eviction/methods/h2o_cache.h"

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"

namespace veloxquant {

void validate_h2o_options(const KVCacheConfig& config) {
  const H2OOptions& o = config.h2o;
  eviction::require_evictable("h2o_budget", o.h2o_budget, "h2o_n_sink", o.h2o_n_sink, "h2o_grace", o.h2o_grace);
  if (!(o.h2o_decay > 0.0 && o.h2o_decay <= 1.0)) {
    throw QuantizerConfigError("h2o_decay must be in (0, 1], got " + std::to_string(o.h2o_decay));
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy h2o_policy(const KVCacheConfig& config) {
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAttentionScored;
  p.budget = config.h2o.h2o_budget;
  p.n_sink = config.h2o.h2o_n_sink;
  p.protect_recent = config.h2o.h2o_grace;
  p.decay = config.h2o.h2o_decay;
  return p;
}

H2OCache::H2OCache(const KVCacheConfig& config)
    : EvictionCache("H2OCache", (validate_h2o_options(config), h2o_policy(config)), eviction::storage_of(config),
                    eviction::scoring_of(config)) {}

std::shared_ptr<lm::KVCache> make_h2o_cache(const KVCacheConfig& config) { return std::make_shared<H2OCache>(config); }

}  // namespace veloxquant
