#include "veloxquant/eviction/methods/snapkv_cache.h"

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"

namespace veloxquant {

namespace {
// kvpress's SnapKV default (anchors.md §1.4): votes averaged over 5 neighbouring rows.
constexpr int64_t kPoolKernel = 5;
}  // namespace

void validate_snapkv_options(const KVCacheConfig& config) {
  const SnapKVOptions& o = config.snapkv;
  if (o.snap_backend != "auto" && o.snap_backend != "mlx" && o.snap_backend != "metal" && o.snap_backend != "reference") {
    throw QuantizerConfigError("snap_backend must be one of auto, mlx, metal, reference, got '" + o.snap_backend + "'");
  }
  if (o.snap_dtype != "auto" && o.snap_dtype != "float16") {
    throw QuantizerConfigError("snap_dtype must be 'auto' or 'float16', got '" + o.snap_dtype + "'");
  }
  if (o.snap_obs_window < 1) {
    throw QuantizerConfigError("snap_obs_window must be >= 1, got " + std::to_string(o.snap_obs_window));
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

}  // namespace veloxquant
