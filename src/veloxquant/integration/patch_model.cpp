#include "veloxquant/integration/patch_model.h"

#include <string>

#include "base/logging.h"
#include "veloxquant/builder/kv_cache_builder.h"

namespace veloxquant::integration {

lm::CacheList patch_model_kv_cache(lm::Model& model, const KVCacheConfig& config) {
  lm::CacheList first = KVCacheBuilder::for_model(model, config);
  // The hook lives inside the model, so the model outlives it: a raw pointer is safe and avoids
  // a reference cycle. for_model reads native_make_cache(), never this hook, so no recursion.
  const lm::Model* target = &model;
  model.make_cache = [target, config] { return KVCacheBuilder::for_model(*target, config); };
  base::log_info("Wired " + std::to_string(first.size()) + " layer cache(s) with '" + config.method +
                 "' (fresh per call)");
  return first;
}

void unpatch_model_kv_cache(lm::Model& model) { model.make_cache = nullptr; }

}  // namespace veloxquant::integration
