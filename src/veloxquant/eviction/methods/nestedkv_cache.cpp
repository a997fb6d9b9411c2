#include "veloxquant/eviction/methods/nestedkv_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {

constexpr const char* kTypeName = "NestedKVCache";

void require_finite(const char* field, double value) {
  if (!std::isfinite(value))
    throw QuantizerConfigError(std::string(field) + " must be finite, got " + std::to_string(value));
}

}  // namespace

void validate_nestedkv_options(const KVCacheConfig& config) {
  const NestedKVOptions& o = config.options<NestedKVOptions>();
  eviction::require_evictable("nestedkv_budget", o.nestedkv_budget, "nestedkv_n_sink", o.nestedkv_n_sink);
  if (o.nestedkv_window < 1) {
    throw QuantizerConfigError("nestedkv_window must be >= 1, got " + std::to_string(o.nestedkv_window));
  }
  require_finite("nestedkv_beta", o.nestedkv_beta);
  require_finite("nestedkv_tau", o.nestedkv_tau);
  require_finite("nestedkv_kappa", o.nestedkv_kappa);
  if (!(o.nestedkv_safeguard_alpha >= 0.0 && o.nestedkv_safeguard_alpha <= 1.0)) {
    throw QuantizerConfigError("nestedkv_safeguard_alpha must lie in [0, 1], got " +
                               std::to_string(o.nestedkv_safeguard_alpha));
  }
  eviction::refuse_without_effect("nestedkv_safeguard_alpha", o.nestedkv_safeguard_alpha,
                                  NestedKVOptions{}.nestedkv_safeguard_alpha,
                                  "every kv head keeps nestedkv_budget rows; there is no cross-head competition "
                                  "whose floor it would set");
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy nestedkv_policy(const KVCacheConfig& config) {
  const NestedKVOptions& o = config.options<NestedKVOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAnchors;
  p.budget = o.nestedkv_budget;
  p.n_sink = o.nestedkv_n_sink;
  p.anchor_window = o.nestedkv_window;
  p.anchor_beta = o.nestedkv_beta;
  p.anchor_tau = o.nestedkv_tau;
  p.anchor_kappa = o.nestedkv_kappa;
  return p;
}

std::shared_ptr<lm::KVCache> make_nestedkv_cache(const KVCacheConfig& config) {
  validate_nestedkv_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, nestedkv_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor nestedkv_method() {
  MethodDescriptor m = eviction::eviction_method("nestedkv", kTypeName);
  m.blurb =
      "Key-only anchors: each key's anomaly against the mean of all keys, of its block and of the recent "
      "window, blended per head and surprise-gated; the sinks and the most anomalous keys fill nestedkv_budget";
  m.paper =
      "NestedKV: Nested Memory Routing for Long-Context KV Cache Compression (Chen et al., preprint arXiv "
      "2605.26678; no peer-reviewed venue, the original's one exception)";
  m.deviations = std::string(
                     "Bounded: every call past the budget scores the stored and new rows afresh and keeps "
                     "the best (the original compresses the prefill once and then appends decode tokens "
                     "without bound). Blocks and windows count the rows present, not absolute positions. "
                     "Every kv head keeps nestedkv_budget rows (the original's registry labels the method "
                     "'quantization'; it is listed with the eviction family here), so "
                     "nestedkv_safeguard_alpha, the floor of the paper's cross-head competition, is refused "
                     "unless left at its default. eviction_scoring has nothing to choose: no attention is "
                     "used.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("nestedkv_budget", &NestedKVOptions::nestedkv_budget, "Rows kept per kv head, sinks included", 1),
      option_field("nestedkv_n_sink", &NestedKVOptions::nestedkv_n_sink, "First positions never evicted", 0),
      option_field("nestedkv_window", &NestedKVOptions::nestedkv_window,
                   "Keys averaged into the current (recent) anchor", 1),
      option_field("nestedkv_beta", &NestedKVOptions::nestedkv_beta,
                   "Sharpness of the per-head blend of the three anomalies"),
      option_field("nestedkv_tau", &NestedKVOptions::nestedkv_tau, "Surprise gate threshold"),
      option_field("nestedkv_kappa", &NestedKVOptions::nestedkv_kappa, "Surprise gate steepness"),
      option_field("nestedkv_safeguard_alpha", &NestedKVOptions::nestedkv_safeguard_alpha,
                   "Cross-head competition floor; only the default (heads keep equal budgets here)"),
  };
  m.validate = validate_nestedkv_options;
  m.make_serving = make_nestedkv_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    NestedKVOptions& o = c.options<NestedKVOptions>();
    o.nestedkv_budget = budget;
    o.nestedkv_n_sink = std::min(o.nestedkv_n_sink, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
