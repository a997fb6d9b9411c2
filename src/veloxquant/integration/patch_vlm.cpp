#include "veloxquant/integration/patch_vlm.h"

#include <string>

#include "base/error.h"
#include "base/logging.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant::integration {

bool method_evicts_tokens(std::string_view method) {
  const MethodDescriptor* descriptor = find_method(method);
  return descriptor && (descriptor->family == "eviction" || static_cast<bool>(descriptor->set_budget));
}

lm::CacheList patch_vlm_kv_cache(lm::Model& model, const KVCacheConfig& config) {
  lm::Model* language = model.language_model();
  if (!language) {
    throw base::InvalidArgument("patch_vlm_kv_cache: model '" + model.config().architecture +
                                "' has no language model (not a vision-language model); use "
                                "patch_model_kv_cache for text-only models");
  }
  if (method_evicts_tokens(config.method)) {
    base::log_warning("method '" + config.method + "' evicts tokens: the image tokens in the prompt prefix may be " +
                      "evicted, and the answer lose what it saw; pure quantizers (turboquant_rvq, kivi, the " +
                      "q8/q5/q4 presets) keep every token");
  }
  // The wrapper itself when it has decoder layers (Qwen2-VL-like), else the language model.
  // for_model refuses standalone methods here, before the hook exists.
  const lm::Model* target = model.layers().empty() ? language : &model;
  lm::CacheList first = KVCacheBuilder::for_model(*target, config);
  language->make_cache = [target, config] { return KVCacheBuilder::for_model(*target, config); };
  base::log_info("Wired " + std::to_string(first.size()) + " layer cache(s) with '" + config.method +
                 "' on the language model (fresh per call)");
  return first;
}

void unpatch_vlm_kv_cache(lm::Model& model) {
  if (lm::Model* language = model.language_model()) language->make_cache = nullptr;
}

}  // namespace veloxquant::integration
