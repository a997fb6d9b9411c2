#include "veloxquant/eviction/methods/h2o_cache.h"

#include "veloxquant/errors.h"
#include <algorithm>
#include <string>

#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

void validate_h2o_options(const KVCacheConfig& config) {
  const H2OOptions& o = config.h2o;
  eviction::require_evictable("h2o_budget", o.h2o_budget, "h2o_n_sink", o.h2o_n_sink, "h2o_grace", o.h2o_grace);
  if (!(o.h2o_decay > 0.0 && o.h2o_decay <= 1.0)) {
    throw QuantizerConfigError("h2o_decay must be in (0, 1], got " + std::to_string(o.h2o_decay));
  }
  eviction::refuse_without_effect("h2o_rope_base", o.h2o_rope_base, H2OOptions{}.h2o_rope_base,
                                  "survivors keep their rotation and position; nothing is re-rotated");
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

MethodDescriptor h2o_method() {
  MethodDescriptor m = eviction::eviction_method("h2o", "H2OCache");
  m.make_restorable = [] { return std::make_shared<H2OCache>(KVCacheConfig{}); };
  m.blurb =
      "Heavy hitters: accumulated attention (decayed) per row; evict the lowest past h2o_budget, sinks and "
      "the newest h2o_grace rows kept";
  m.paper =
      "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models (Zhang et al., "
      "NeurIPS 2023, arXiv 2306.14048)";
  m.deviations = std::string(
                     "The new token is scored by its own attention weight (the original appends it "
                     "with 0, the first token with 1). h2o_rope_base is refused unless left at its "
                     "default: survivors are never re-rotated.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("h2o_budget", &KVCacheConfig::h2o, &H2OOptions::h2o_budget, "Rows kept per head, sinks included", 1),
      option_field("h2o_n_sink", &KVCacheConfig::h2o, &H2OOptions::h2o_n_sink, "First positions never evicted", 0),
      option_field("h2o_rope_base", &KVCacheConfig::h2o, &H2OOptions::h2o_rope_base,
                   "The original's re-rotation base; only the default is accepted (survivors keep their rotation)"),
      option_field("h2o_grace", &KVCacheConfig::h2o, &H2OOptions::h2o_grace, "Newest rows never evicted", 0),
      option_field("h2o_decay", &KVCacheConfig::h2o, &H2OOptions::h2o_decay,
                   "Score decay per step, in (0, 1]; 1 = plain accumulation"),
  };
  m.validate = validate_h2o_options;
  m.make_serving = make_h2o_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    c.h2o.h2o_budget = budget;
    c.h2o.h2o_n_sink = std::min(c.h2o.h2o_n_sink, budget / 4);
    c.h2o.h2o_grace = std::min(c.h2o.h2o_grace, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
