#include "veloxquant/eviction/methods/pyramidkv_cache.h"

#include "veloxquant/errors.h"
#include <algorithm>
#include <string>

#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"
#include "veloxquant/eviction/pyramid_schedule.h"

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
  if (o.pyramid_backend == "mlx" || o.pyramid_backend == "metal") {
    eviction::refuse_without_effect("pyramid_backend", o.pyramid_backend, "reference",
                                    "one CPU path; 'auto' is the same");
  }
  if (o.pyramid_grace < 0)
    throw QuantizerConfigError("pyramid_grace must be >= 0, got " + std::to_string(o.pyramid_grace));
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

MethodDescriptor pyramidkv_method() {
  MethodDescriptor m = eviction::eviction_method("pyramidkv", "PyramidKVCache");
  m.make_restorable = [] { return std::make_shared<PyramidKVCache>(KVCacheConfig{}); };
  m.blurb =
      "H2O scoring with per-layer budgets tapering linearly from shallow to deep layers, mean pyramid_budget; "
      "the newest pyramid_grace rows kept";
  m.paper =
      "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling (Cai et al., "
      "arXiv 2406.02069)";
  m.deviations = std::string(
                     "Within a layer the original's H2O scorer (no decay), the new token scored by its "
                     "own weight, plus pyramid_grace newest rows protected (new, default 16; the original "
                     "has none and then evicts nearly every new token); the paper selects by an "
                     "observation window. Schedule as the original (Python rounding, water-filling).") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("pyramid_budget", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_budget,
                   "Average rows kept per head over the attention layers", 1),
      option_field("pyramid_backend", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_backend,
                   "reference or auto (one CPU path; mlx / metal are refused)"),
      option_field("pyramid_n_sink", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_n_sink,
                   "First positions never evicted", 0),
      option_field("pyramid_beta", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_beta,
                   "Taper strength, >= 1 (1 = flat)"),
      option_field("pyramid_resolved_budget", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_resolved_budget,
                   "This layer's budget, injected by for_model (None = pyramid_budget)", 1),
      option_field("pyramid_grace", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_grace,
                   "Newest rows never evicted, limited per layer to budget - n_sink - 1 (new; 0 = the "
                   "original)",
                   0),
  };
  m.validate = validate_pyramidkv_options;
  m.make_serving = make_pyramidkv_cache;
  // The schedule is resolved over the whole model once; each layer gets its budget.
  m.wire_model = [](const KVCacheConfig& config, std::size_t n_attention_layers) -> LayerCacheFactory {
    const std::vector<int> budgets =
        eviction::pyramid_budgets(config.pyramidkv.pyramid_budget, config.pyramidkv.pyramid_n_sink,
                                  config.pyramidkv.pyramid_beta, n_attention_layers);
    return [budgets](const KVCacheConfig& layer_config, std::size_t attention_index) {
      KVCacheConfig c = layer_config;
      c.pyramidkv.pyramid_resolved_budget = budgets.at(attention_index);
      return make_pyramidkv_cache(c);
    };
  };
  m.set_budget = [](KVCacheConfig& c, int budget) {
    c.pyramidkv.pyramid_budget = budget;
    c.pyramidkv.pyramid_n_sink = std::min(c.pyramidkv.pyramid_n_sink, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
