#include "veloxquant/eviction/methods/tova_cache.h"

#include <algorithm>
#include <string>

#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

void validate_tova_options(const KVCacheConfig& config) {
  eviction::require_evictable("tova_budget", config.tova.tova_budget, "tova_n_sink", config.tova.tova_n_sink);
  eviction::refuse_without_effect("tova_backend", config.tova.tova_backend, TOVAOptions{}.tova_backend,
                                  "one CPU path; the original's kernel choice has nothing to choose from");
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

std::shared_ptr<lm::KVCache> make_tova_cache(const KVCacheConfig& config) {
  return std::make_shared<TovaCache>(config);
}

MethodDescriptor tova_method() {
  MethodDescriptor m = eviction::eviction_method("tova", "TovaCache");
  m.make_restorable = [] { return std::make_shared<TovaCache>(KVCacheConfig{}); };
  m.blurb = "Memoryless: past tova_budget evict the row with the lowest attention weight of the current step";
  m.paper = "Transformers are Multi-State RNNs (Oren et al., arXiv 2401.06104)";
  m.deviations =
      std::string(
          "Weights averaged over the GQA group of the kv head (the paper averages over all "
          "heads; heads evict independently here). tova_backend other than auto is refused (one CPU path).") +
      eviction::kCompositionNote;
  m.fields = {
      option_field("tova_budget", &KVCacheConfig::tova, &TOVAOptions::tova_budget, "Rows kept per head, sinks included",
                   1),
      option_field("tova_n_sink", &KVCacheConfig::tova, &TOVAOptions::tova_n_sink, "First positions never evicted", 0),
      option_field("tova_backend", &KVCacheConfig::tova, &TOVAOptions::tova_backend,
                   "The original's kernel choice; only auto (one CPU path here)"),
  };
  m.validate = validate_tova_options;
  m.make_serving = make_tova_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    c.tova.tova_budget = budget;
    c.tova.tova_n_sink = std::min(c.tova.tova_n_sink, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
