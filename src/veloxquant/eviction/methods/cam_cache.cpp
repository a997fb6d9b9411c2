#include "veloxquant/eviction/methods/cam_cache.h"

#include <algorithm>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "CaMCache";
}  // namespace

void validate_cam_options(const KVCacheConfig& config) {
  const CaMOptions& o = config.options<CaMOptions>();
  eviction::require_evictable("cam_budget", o.cam_budget, "cam_n_sink", o.cam_n_sink);
  if (o.cam_merge != "sim_weighted" && o.cam_merge != "mean" && o.cam_merge != "drop") {
    throw QuantizerConfigError("cam_merge must be 'sim_weighted', 'mean' or 'drop', got '" + o.cam_merge + "'");
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy cam_policy(const KVCacheConfig& config) {
  const CaMOptions& o = config.options<CaMOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAttentionScored;
  p.budget = o.cam_budget;
  p.n_sink = o.cam_n_sink;
  p.decay = 1.0;  // the original's H2O scorer: plain accumulation, no grace
  p.merge = eviction::parse_merge(o.cam_merge);
  p.merge_keys = o.cam_merge_keys;
  p.merge_gate = o.cam_merge_gate;
  p.merge_seed = static_cast<uint64_t>(config.seed);  // for_model: seed + layer index
  return p;
}

std::shared_ptr<lm::KVCache> make_cam_cache(const KVCacheConfig& config) {
  validate_cam_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, cam_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor cam_method() {
  MethodDescriptor m = eviction::eviction_method("cam", kTypeName);
  m.blurb =
      "H2O scorer, but the evicted row's value is merged into its most key-similar survivor (Bernoulli gate "
      "by the score ratio) instead of dropped";
  m.paper = "CaM: Cache Merging for Memory-efficient LLMs Inference (Zhang et al., ICML 2024)";
  m.deviations = std::string(
                     "One survivor absorbs each victim (the most cosine-similar key), blended as "
                     "(1 - a) v + a v_evicted with a = 1/2 (mean) or s / (1 + s), s = max(0, cosine) "
                     "(sim_weighted); the gate draws from (seed + layer, position). Merged rows stored "
                     "quantized are re-encoded. A decode step takes the general selection path (it needs "
                     "every survivor's key).") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("cam_budget", &CaMOptions::cam_budget, "Rows kept per head, sinks included", 1),
      option_field("cam_n_sink", &CaMOptions::cam_n_sink, "First positions never evicted", 0),
      option_field("cam_merge", &CaMOptions::cam_merge,
                   "sim_weighted (blend by key cosine), mean (average), or drop (= the H2O scorer)"),
      option_field("cam_merge_keys", &CaMOptions::cam_merge_keys, "Blend the evicted key into the survivor's too"),
      option_field("cam_merge_gate", &CaMOptions::cam_merge_gate,
                   "Merge only with probability min(1, victim score / survivor score)"),
  };
  m.validate = validate_cam_options;
  m.make_serving = make_cam_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    CaMOptions& o = c.options<CaMOptions>();
    o.cam_budget = budget;
    o.cam_n_sink = std::min(o.cam_n_sink, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
