#pragma once
// Wiring veloxquant caches into a vision-language model (spec §5.2): the caches of its
// language model only, the vision tower untouched.
#include <string_view>

#include "lm/model.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant::integration {

// As patch_model_kv_cache (§5.1), for a model whose decoder is model.language_model():
//  - throws std::invalid_argument (base::InvalidArgument) naming patch_model_kv_cache when the
//    model has no language model (a text model);
//  - warns when the method evicts tokens: the image rows sit in the prompt prefix and may be
//    evicted; pure quantizers keep every row;
//  - builds one list right away through KVCacheBuilder::for_model — from the wrapper when it
//    has decoder layers of its own, else from the language model — so a bad config (a
//    standalone method, a wrong-length bit list) throws before anything changes;
//  - installs a make_cache hook on the LANGUAGE MODEL ONLY that builds a fresh list per call
//    (the wrapper's own hook is left alone, as the original leaves mlx-vlm's top-level one for
//    its batched path);
//  - logs "Wired N layer cache(s) with '<method>' on the language model (fresh per call)";
//  - returns the first list.
// The model (and so its language model) must outlive the hook, as with patch_model_kv_cache.
lm::CacheList patch_vlm_kv_cache(lm::Model& model, const KVCacheConfig& config);

// Removes the language model's hook: native caches again. No-op for a text model.
void unpatch_vlm_kv_cache(lm::Model& model);

// Whether `method` (a registry name) drops tokens from the cache: the eviction family and
// every method with an eviction budget. Unknown names: false.
bool method_evicts_tokens(std::string_view method);

}  // namespace veloxquant::integration
