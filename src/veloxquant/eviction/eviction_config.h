#pragma once
// Checks shared by the eviction methods' options (spec §3.4): the storage and scoring choices
// every eviction cache reads, and the original's "sinks (and grace) leave nothing evictable".
#include <string>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"

namespace veloxquant::eviction {

// eviction_storage and eviction_scoring values; bit widths the chosen storage supports.
void validate_storage_and_scoring(const KVCacheConfig& config);

// budget_field >= 1; n_sink < budget; with a grace, n_sink + grace < budget when either is
// nonzero (the original's init_h2o_state). Messages name the fields and their values.
void require_evictable(const std::string& budget_field, int budget, const std::string& sink_field, int n_sink,
                       const std::string& grace_field = "", int grace = 0);

// The storage / scoring the config asks for (validated).
StorageSpec storage_of(const KVCacheConfig& config);
Scoring scoring_of(const KVCacheConfig& config);

}  // namespace veloxquant::eviction
