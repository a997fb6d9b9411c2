#include "veloxquant/eviction/methods/morphkv_cache.h"

#include <algorithm>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "MorphKVCache";
}  // namespace

void validate_morphkv_options(const KVCacheConfig& config) {
  const MorphKVOptions& o = config.options<MorphKVOptions>();
  eviction::require_evictable("morphkv_budget", o.morphkv_budget, "morphkv_n_sink", o.morphkv_n_sink);
  if (o.morphkv_window < 1) {
    throw QuantizerConfigError("morphkv_window must be >= 1, got " + std::to_string(o.morphkv_window));
  }
  // The window's older rows (window - 1) are protected: with the sinks they must leave a row.
  if (o.morphkv_n_sink + o.morphkv_window - 1 >= o.morphkv_budget) {
    throw QuantizerConfigError("morphkv_n_sink + morphkv_window - 1 = " + std::to_string(o.morphkv_n_sink) + " + " +
                               std::to_string(o.morphkv_window) + " - 1 must be below morphkv_budget=" +
                               std::to_string(o.morphkv_budget) + ": sinks and window would leave nothing evictable");
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy morphkv_policy(const KVCacheConfig& config) {
  const MorphKVOptions& o = config.options<MorphKVOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kRecentVotes;
  p.budget = o.morphkv_budget;
  p.n_sink = o.morphkv_n_sink;
  p.obs_window = o.morphkv_window;
  p.protect_recent = o.morphkv_window - 1;  // the next token's other voters stay live
  return p;
}

std::shared_ptr<lm::KVCache> make_morphkv_cache(const KVCacheConfig& config) {
  validate_morphkv_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, morphkv_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor morphkv_method() {
  MethodDescriptor m = eviction::eviction_method("morphkv", kTypeName);
  m.blurb =
      "The newest morphkv_window tokens vote (their attention summed) for the rows to keep, recomputed every "
      "token; past morphkv_budget evict the least voted row (sinks and window kept); window 1 = TOVA";
  m.paper =
      "Dialogue without Limits: Constant-Sized KV Caches for Extended Responses in LLMs (MorphKV, Ghadia et "
      "al., ICML 2025, arXiv 2503.00979)";
  m.deviations = std::string(
                     "Voters that are tokens of the current call use their real queries "
                     "(eviction_scoring=auto); voters stored by earlier calls vote with their keys, the "
                     "original's key-as-query (their queries are gone), so proxy scoring is the original "
                     "exactly. Votes are summed (the paper also offers a max fusion). A decode step takes "
                     "the general selection path (every row is re-scored).") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("morphkv_budget", &MorphKVOptions::morphkv_budget, "Rows kept per head, sinks included", 1),
      option_field("morphkv_n_sink", &MorphKVOptions::morphkv_n_sink, "First positions never evicted", 0),
      option_field("morphkv_window", &MorphKVOptions::morphkv_window,
                   "Newest tokens that vote (all but the newest protected); 1 = TOVA", 1),
  };
  m.validate = validate_morphkv_options;
  m.make_serving = make_morphkv_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    MorphKVOptions& o = c.options<MorphKVOptions>();
    o.morphkv_budget = budget;
    o.morphkv_n_sink = std::min(o.morphkv_n_sink, budget / 4);
    o.morphkv_window = std::max(1, std::min(o.morphkv_window, budget / 4));
  };
  return m;
}

}  // namespace veloxquant
