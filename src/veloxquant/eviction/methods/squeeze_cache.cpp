#include "veloxquant/eviction/methods/squeeze_cache.h"

#include <algorithm>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "SqueezeCache";
}  // namespace

void validate_squeeze_options(const KVCacheConfig& config) {
  const SqueezeOptions& o = config.options<SqueezeOptions>();
  eviction::require_evictable("squeeze_budget", o.squeeze_budget, "squeeze_n_sink", o.squeeze_n_sink);
  if (o.squeeze_grace < 0)
    throw QuantizerConfigError("squeeze_grace must be >= 0, got " + std::to_string(o.squeeze_grace));
  if (!(o.squeeze_strength >= 0.0 && o.squeeze_strength <= 1.0)) {
    throw QuantizerConfigError("squeeze_strength must lie in [0, 1], got " + std::to_string(o.squeeze_strength));
  }
  if (o.squeeze_resolved_budget) {
    eviction::require_evictable("squeeze_resolved_budget", *o.squeeze_resolved_budget, "squeeze_n_sink",
                                o.squeeze_n_sink);
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy squeeze_policy(const KVCacheConfig& config) {
  const SqueezeOptions& o = config.options<SqueezeOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAttentionScored;
  p.budget = o.squeeze_resolved_budget.value_or(o.squeeze_budget);
  p.n_sink = o.squeeze_n_sink;
  p.protect_recent = o.squeeze_grace;  // limited per layer by EvictionPolicy::effective_protect
  return p;
}

SqueezeCache::SqueezeCache(const KVCacheConfig& config, std::shared_ptr<eviction::SqueezeSchedule> schedule,
                           std::size_t attention_index)
    : EvictionCache(kTypeName, (validate_squeeze_options(config), squeeze_policy(config)), eviction::storage_of(config),
                    eviction::scoring_of(config)),
      schedule_(std::move(schedule)),
      layer_(attention_index),
      resolved_(schedule_ == nullptr) {}

void SqueezeCache::before_update(const lm::Tensor& keys) {
  if (resolved_) return;
  if (!reported_) {
    schedule_->report(layer_, eviction::layer_concentration(keys));
    reported_ = true;
  }
  if (const std::optional<int> budget = schedule_->budget(layer_)) {
    change_budget(*budget);
    resolved_ = true;
  }
}

std::shared_ptr<lm::KVCache> make_squeeze_cache(const KVCacheConfig& config) {
  return std::make_shared<SqueezeCache>(config, nullptr, 0);
}

MethodDescriptor squeeze_method() {
  MethodDescriptor m = eviction::eviction_method("squeeze", kTypeName);
  m.capabilities.needs_coordinator = true;  // the layers share one SqueezeSchedule (wire_model)
  m.blurb =
      "H2O scoring with per-layer budgets reallocated once from each layer's key concentration (broad "
      "layers get more rows), mean squeeze_budget; the newest squeeze_grace rows kept";
  m.paper =
      "SqueezeAttention: 2D Management of KV-Cache in LLM Inference via Layer-wise Optimal Budget (Wang et "
      "al., arXiv 2404.04793)";
  m.deviations = std::string(
                     "The original's proxy for the paper's layer importance: the mean pairwise cosine of "
                     "the layer's first-call keys (averaged over kv heads here), not the cosine between a "
                     "layer's hidden states before and after attention, and a continuous reallocation "
                     "instead of the paper's three k-means groups. Within a layer the H2O scorer (the new "
                     "token scored by its own weight) plus squeeze_grace newest rows protected (new, "
                     "default 16; 0 = the original). A layer's storage is reallocated once, when the "
                     "schedule resolves, for exactly its budget.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("squeeze_budget", &SqueezeOptions::squeeze_budget,
                   "Average rows kept per head over the attention layers (and each layer's budget until every "
                   "layer has reported)",
                   1),
      option_field("squeeze_n_sink", &SqueezeOptions::squeeze_n_sink, "First positions never evicted", 0),
      option_field("squeeze_strength", &SqueezeOptions::squeeze_strength,
                   "Reallocation strength in [0, 1] (0 = every layer squeeze_budget, H2O)"),
      option_field("squeeze_resolved_budget", &SqueezeOptions::squeeze_resolved_budget,
                   "A fixed budget for this layer (None = the data-driven schedule)", 1),
      option_field("squeeze_grace", &SqueezeOptions::squeeze_grace,
                   "Newest rows never evicted, limited per layer to budget - n_sink - 1 (new; 0 = the original)", 0),
  };
  m.validate = validate_squeeze_options;
  m.make_serving = make_squeeze_cache;
  // One schedule per model: every attention layer reports to it and reads its budget from it.
  m.wire_model = [](const KVCacheConfig& config, std::size_t n_attention_layers) -> LayerCacheFactory {
    const SqueezeOptions& o = config.options<SqueezeOptions>();
    std::shared_ptr<eviction::SqueezeSchedule> schedule;
    if (!o.squeeze_resolved_budget) {
      schedule = std::make_shared<eviction::SqueezeSchedule>(n_attention_layers, o.squeeze_budget, o.squeeze_n_sink,
                                                             o.squeeze_strength);
    }
    return [schedule](const KVCacheConfig& layer_config, std::size_t attention_index) -> std::shared_ptr<lm::KVCache> {
      return std::make_shared<SqueezeCache>(layer_config, schedule, attention_index);
    };
  };
  m.set_budget = [](KVCacheConfig& c, int budget) {
    SqueezeOptions& o = c.options<SqueezeOptions>();
    o.squeeze_budget = budget;
    o.squeeze_n_sink = std::min(o.squeeze_n_sink, budget / 4);
    o.squeeze_grace = std::min(o.squeeze_grace, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
