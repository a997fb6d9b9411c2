#include "veloxquant/eviction/methods/qfilters_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "QFiltersCache";
}  // namespace

void validate_qfilters_options(const KVCacheConfig& config) {
  const QFiltersOptions& o = config.options<QFiltersOptions>();
  eviction::require_evictable("qfilters_budget", o.qfilters_budget, "qfilters_n_sink", o.qfilters_n_sink,
                              "qfilters_recent", o.qfilters_recent);
  if (o.qfilters_calib_tokens < 1) {
    throw QuantizerConfigError("qfilters_calib_tokens must be >= 1, got " + std::to_string(o.qfilters_calib_tokens));
  }
  if (o.qfilters_sign != 1 && o.qfilters_sign != -1) {
    throw QuantizerConfigError("qfilters_sign must be +1 or -1, got " + std::to_string(o.qfilters_sign));
  }
  if (o.qfilters_min_retention && !(std::isfinite(*o.qfilters_min_retention) && *o.qfilters_min_retention > 0.0 &&
                                    *o.qfilters_min_retention <= 1.0)) {
    throw QuantizerConfigError("qfilters_min_retention must be None or in (0, 1], got " +
                               std::to_string(*o.qfilters_min_retention));
  }
  const std::string& action = o.qfilters_on_low_retention;
  if (action != "warn" && action != "raise" && action != "ignore") {
    throw QuantizerConfigError("qfilters_on_low_retention must be 'warn', 'raise' or 'ignore', got '" + action + "'");
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy qfilters_policy(const KVCacheConfig& config) {
  const QFiltersOptions& o = config.options<QFiltersOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kDirection;
  p.budget = o.qfilters_budget;
  p.n_sink = o.qfilters_n_sink;
  p.protect_recent = o.qfilters_recent;
  p.calib_tokens = o.qfilters_calib_tokens;
  p.direction_sign = o.qfilters_sign;
  p.min_retention = o.qfilters_min_retention.value_or(0.0);
  p.on_low_retention = o.qfilters_on_low_retention == "raise"    ? eviction::EvictionPolicy::LowRetention::kRaise
                       : o.qfilters_on_low_retention == "ignore" ? eviction::EvictionPolicy::LowRetention::kIgnore
                                                                 : eviction::EvictionPolicy::LowRetention::kWarn;
  return p;
}

std::shared_ptr<lm::KVCache> make_qfilters_cache(const KVCacheConfig& config) {
  validate_qfilters_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, qfilters_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor qfilters_method() {
  MethodDescriptor m = eviction::eviction_method("qfilters", kTypeName);
  m.blurb =
      "Keys scored by their projection on each head's principal key direction (SVD of the first "
      "qfilters_calib_tokens keys); past qfilters_budget evict the lowest; no attention needed";
  m.paper = "Q-Filters: Leveraging QK Geometry for Efficient KV Cache Compression (Godey et al., arXiv 2503.02812)";
  m.deviations = std::string(
                     "The direction comes from the first min(qfilters_calib_tokens, budget + 1) keys "
                     "the cache sees (the paper calibrates query directions offline on other data), by "
                     "power iteration, oriented so their mean projection is >= 0: qfilters_sign=+1 keeps "
                     "keys along it. Multi-token calls return every new row (the original caps knorm's "
                     "and qfilters' returned rows). The warning is logged once per process. A decode "
                     "step takes the general selection path.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("qfilters_budget", &QFiltersOptions::qfilters_budget, "Rows kept per head, sinks included", 1),
      option_field("qfilters_n_sink", &QFiltersOptions::qfilters_n_sink, "First positions never evicted", 0),
      option_field("qfilters_recent", &QFiltersOptions::qfilters_recent, "Newest rows never evicted", 0),
      option_field("qfilters_calib_tokens", &QFiltersOptions::qfilters_calib_tokens,
                   "First keys that fix each head's direction (at most budget + 1 are used)", 1),
      option_field("qfilters_sign", &QFiltersOptions::qfilters_sign, "+1 keeps keys along the direction, -1 against it",
                   -1, 1),
      option_field("qfilters_min_retention", &QFiltersOptions::qfilters_min_retention,
                   "Retention floor budget / tokens in (0, 1]; None = never checked"),
      option_field("qfilters_on_low_retention", &QFiltersOptions::qfilters_on_low_retention,
                   "Below the floor: warn (once), raise (QuantizerConfigError from the update) or ignore"),
  };
  m.validate = validate_qfilters_options;
  m.make_serving = make_qfilters_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    QFiltersOptions& o = c.options<QFiltersOptions>();
    o.qfilters_budget = budget;
    o.qfilters_n_sink = std::min(o.qfilters_n_sink, budget / 4);
    o.qfilters_recent = std::min(o.qfilters_recent, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
