#include "veloxquant/eviction/methods/knorm_cache.h"

#include <algorithm>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "KnormCache";
}  // namespace

void validate_knorm_options(const KVCacheConfig& config) {
  const KnormOptions& o = config.options<KnormOptions>();
  eviction::require_evictable("knorm_budget", o.knorm_budget, "knorm_n_sink", o.knorm_n_sink, "knorm_recent",
                              o.knorm_recent);
  if (o.knorm_keep != "low" && o.knorm_keep != "high") {
    throw QuantizerConfigError("knorm_keep must be 'low' or 'high', got '" + o.knorm_keep + "'");
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy knorm_policy(const KVCacheConfig& config) {
  const KnormOptions& o = config.options<KnormOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kKeyNorm;
  p.budget = o.knorm_budget;
  p.n_sink = o.knorm_n_sink;
  p.protect_recent = o.knorm_recent;
  p.key_norm_sign = o.knorm_keep == "low" ? -1 : 1;  // the argmin of the score is evicted
  return p;
}

std::shared_ptr<lm::KVCache> make_knorm_cache(const KVCacheConfig& config) {
  validate_knorm_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, knorm_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor knorm_method() {
  MethodDescriptor m = eviction::eviction_method("knorm", kTypeName);
  m.blurb =
      "Key L2 norm: past knorm_budget evict the row whose key has the highest norm (knorm_keep=low), sinks "
      "and the newest knorm_recent rows kept; no attention needed";
  m.paper =
      "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression (Devoto et al., EMNLP 2024, "
      "arXiv 2406.11430)";
  m.deviations = std::string(
                     "Norms of the keys as they arrive (before any eviction_storage quantization). "
                     "Multi-token calls return every new row and evict only what is stored (the "
                     "original caps the returned rows of knorm directly). eviction_scoring has nothing "
                     "to choose: scores never use attention.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("knorm_budget", &KnormOptions::knorm_budget, "Rows kept per head, sinks included", 1),
      option_field("knorm_n_sink", &KnormOptions::knorm_n_sink, "First positions never evicted", 0),
      option_field("knorm_recent", &KnormOptions::knorm_recent, "Newest rows never evicted", 0),
      option_field("knorm_keep", &KnormOptions::knorm_keep,
                   "low keeps low-norm keys (the paper: they draw attention); high keeps high-norm keys"),
  };
  m.validate = validate_knorm_options;
  m.make_serving = make_knorm_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    KnormOptions& o = c.options<KnormOptions>();
    o.knorm_budget = budget;
    o.knorm_n_sink = std::min(o.knorm_n_sink, budget / 4);
    o.knorm_recent = std::min(o.knorm_recent, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
