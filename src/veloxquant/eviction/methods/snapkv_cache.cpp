#include "veloxquant/eviction/methods/snapkv_cache.h"

#include "veloxquant/errors.h"
#include <algorithm>
#include <string>

#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
// kvpress's SnapKV default (anchors.md §1.4): votes averaged over 5 neighbouring rows.
constexpr int64_t kPoolKernel = 5;
}  // namespace

void validate_snapkv_options(const KVCacheConfig& config) {
  const SnapKVOptions& o = config.snapkv;
  if (o.snap_backend != "auto" && o.snap_backend != "mlx" && o.snap_backend != "metal" &&
      o.snap_backend != "reference") {
    throw QuantizerConfigError("snap_backend must be one of auto, mlx, metal, reference, got '" + o.snap_backend + "'");
  }
  if (o.snap_dtype != "auto" && o.snap_dtype != "float16") {
    throw QuantizerConfigError("snap_dtype must be 'auto' or 'float16', got '" + o.snap_dtype + "'");
  }
  if (o.snap_obs_window < 1) {
    throw QuantizerConfigError("snap_obs_window must be >= 1, got " + std::to_string(o.snap_obs_window));
  }
  // Valid names of the original; the GPU ones and the batching switch change nothing on one CPU path.
  if (o.snap_backend != "reference") {
    eviction::refuse_without_effect("snap_backend", o.snap_backend, "auto", "one CPU path; 'reference' is the same");
  }
  if (!o.snap_batched_scoring) {
    throw QuantizerConfigError(
        "snap_batched_scoring=false has no effect here (scores are computed one way); leave it "
        "at true");
  }
  eviction::require_evictable("snap_budget", o.snap_budget, "snap_n_sink", o.snap_n_sink);
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy snapkv_policy(const KVCacheConfig& config) {
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kObservationWindow;
  p.budget = config.snapkv.snap_budget;
  p.n_sink = config.snapkv.snap_n_sink;
  p.obs_window = config.snapkv.snap_obs_window;
  p.protect_recent = config.snapkv.snap_obs_window;
  p.pool_kernel = kPoolKernel;
  return p;
}

SnapKVCache::SnapKVCache(const KVCacheConfig& config)
    : EvictionCache("SnapKVCache", (validate_snapkv_options(config), snapkv_policy(config)),
                    eviction::storage_of(config), eviction::scoring_of(config)) {}

std::shared_ptr<lm::KVCache> make_snapkv_cache(const KVCacheConfig& config) {
  return std::make_shared<SnapKVCache>(config);
}

MethodDescriptor snapkv_method() {
  MethodDescriptor m = eviction::eviction_method("snapkv", "SnapKVCache");
  m.make_restorable = [] { return std::make_shared<SnapKVCache>(KVCacheConfig{}); };
  m.blurb =
      "Prefill chunks: the last snap_obs_window tokens vote (pooled attention) for the rows to keep; sinks and "
      "window kept";
  m.paper = "SnapKV: LLM Knows What You are Looking for Before Generation (Li et al., arXiv 2404.14469)";
  m.deviations = std::string(
                     "Decode steps respect the budget too (the original and the paper append them "
                     "without bound): their attention adds to the votes and the lowest-voted row past "
                     "snap_budget is evicted, the newest snap_obs_window rows kept. Votes average-pooled "
                     "over 5 rows (kvpress). snap_backend (auto / reference) and "
                     "snap_batched_scoring (true) accept only values that match this one CPU path; snap_dtype "
                     "is validated and otherwise unused: rows are stored in the input dtype.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("snap_dtype", &KVCacheConfig::snapkv, &SnapKVOptions::snap_dtype,
                   "auto or float16 (validated; rows keep the input dtype)"),
      option_field("snap_batched_scoring", &KVCacheConfig::snapkv, &SnapKVOptions::snap_batched_scoring,
                   "The original's batched scoring switch; only true (one scoring path here)"),
      option_field("snap_backend", &KVCacheConfig::snapkv, &SnapKVOptions::snap_backend,
                   "auto or reference (one CPU path; mlx / metal are refused)"),
      option_field("snap_budget", &KVCacheConfig::snapkv, &SnapKVOptions::snap_budget,
                   "Rows kept per head, sinks included", 1),
      option_field("snap_obs_window", &KVCacheConfig::snapkv, &SnapKVOptions::snap_obs_window,
                   "Newest tokens of a prefill chunk that vote (and are kept)", 1),
      option_field("snap_n_sink", &KVCacheConfig::snapkv, &SnapKVOptions::snap_n_sink, "First positions never evicted",
                   0),
  };
  m.validate = validate_snapkv_options;
  m.make_serving = make_snapkv_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    c.snapkv.snap_budget = budget;
    c.snapkv.snap_n_sink = std::min(c.snapkv.snap_n_sink, budget / 4);
    c.snapkv.snap_obs_window = std::max(1, std::min(c.snapkv.snap_obs_window, budget / 2));
  };
  return m;
}

}  // namespace veloxquant
