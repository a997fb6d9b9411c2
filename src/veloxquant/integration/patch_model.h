#pragma once
// Wiring veloxquant caches into a host model without changing the host (spec §5.1).
#include "lm/model.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant::integration {

// Builds one cache list right away through KVCacheBuilder::for_model — so a bad config throws
// QuantizerConfigError before anything changes and model.make_cache stays untouched — then
// installs a make_cache hook that builds a FRESH list on every call (a second generate() starts
// clean; pinning one list leaked KV state between generations in the original). Returns the
// first list and logs "Wired N layer cache(s) with '<method>' (fresh per call)".
lm::CacheList patch_model_kv_cache(lm::Model& model, const KVCacheConfig& config);

// Removes the hook: the model makes its native caches again.
void unpatch_model_kv_cache(lm::Model& model);

}  // namespace veloxquant::integration
