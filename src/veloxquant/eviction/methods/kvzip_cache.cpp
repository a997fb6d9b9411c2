#include "veloxquant/eviction/methods/kvzip_cache.h"

#include <algorithm>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "KVzipCache";
}  // namespace

void validate_kvzip_options(const KVCacheConfig& config) {
  const KVzipOptions& o = config.options<KVzipOptions>();
  eviction::require_evictable("kvzip_budget", o.kvzip_budget, "kvzip_n_sink", o.kvzip_n_sink);
  if (o.kvzip_probe != "context" && o.kvzip_probe != "latest") {
    throw QuantizerConfigError("kvzip_probe must be 'context' or 'latest', got '" + o.kvzip_probe + "'");
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy kvzip_policy(const KVCacheConfig& config) {
  const KVzipOptions& o = config.options<KVzipOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAttentionScored;
  p.budget = o.kvzip_budget;
  p.n_sink = o.kvzip_n_sink;
  if (o.kvzip_probe == "context") {
    p.max_combine = true;  // the most any probe relied on the row
  } else {
    p.accumulate = false;  // latest: the current step only (TOVA)
  }
  return p;
}

std::shared_ptr<lm::KVCache> make_kvzip_cache(const KVCacheConfig& config) {
  validate_kvzip_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, kvzip_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor kvzip_method() {
  MethodDescriptor m = eviction::eviction_method("kvzip", kTypeName);
  m.blurb =
      "Reliance = the most attention a row ever received from one query; past kvzip_budget evict the least "
      "relied-on row (sinks kept); kvzip_probe=latest is TOVA";
  m.paper =
      "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction (Kim et al., NeurIPS 2025, "
      "arXiv 2505.23416)";
  m.deviations = std::string(
                     "The probes are the queries the model runs anyway (each new token, or the "
                     "key-as-query proxy), not the paper's separate context-reconstruction prefill; "
                     "reliance is the maximum over them of the GQA-group mean weight. Evicts one row per "
                     "token (the paper ranks once after prefill).") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("kvzip_budget", &KVzipOptions::kvzip_budget, "Rows kept per head, sinks included", 1),
      option_field("kvzip_n_sink", &KVzipOptions::kvzip_n_sink, "First positions never evicted", 0),
      option_field("kvzip_probe", &KVzipOptions::kvzip_probe,
                   "context: the most attention from any probe so far; latest: the current step only (= TOVA)"),
  };
  m.validate = validate_kvzip_options;
  m.make_serving = make_kvzip_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    KVzipOptions& o = c.options<KVzipOptions>();
    o.kvzip_budget = budget;
    o.kvzip_n_sink = std::min(o.kvzip_n_sink, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
