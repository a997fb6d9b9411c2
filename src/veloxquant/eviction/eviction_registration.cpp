#include "veloxquant/eviction/eviction_registration.h"

#include <cstdio>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_cache.h"

namespace veloxquant::eviction {

const char* const kCompositionNote =
    " New: eviction_storage stores the kept rows as turboquant_rvq or kivi codes; eviction_scoring=auto "
    "scores with the layer's real queries when the host offers them (proxy = the original's key-as-query).";

MethodDescriptor eviction_method(std::string name, std::string cache_type_name) {
  MethodDescriptor m;
  m.name = std::move(name);
  m.family = "eviction";
  m.is_servable = true;
  m.capabilities = {.trimmable = false, .fused_attention = true, .real_compression = true};
  m.docs = "docs/methods/" + m.name + ".md";
  // bit_width_inlier and seed matter only with a quantized eviction_storage.
  m.generic_fields = {"head_dim", "bit_width_inlier", "seed", "eviction_storage", "eviction_scoring"};
  m.borrowed_fields = {"rvq_value_bits", "rvq_stage2_scale", "kivi_group_size"};
  m.reads_bit_width = [](const KVCacheConfig& c) { return c.eviction.eviction_storage != "dtype"; };
  m.cache_type_name = std::move(cache_type_name);
  m.make_restorable = [type = m.cache_type_name]() -> std::shared_ptr<lm::KVCache> {
    return std::make_shared<EvictionCache>(type, EvictionPolicy{}, StorageSpec{}, Scoring::kAuto);
  };
  return m;
}

void refuse_without_effect(const std::string& field, const std::string& value, const std::string& accepted,
                           const std::string& why) {
  if (value == accepted) return;
  throw QuantizerConfigError(field + "='" + value + "' has no effect here (" + why + "); leave it at '" + accepted +
                             "'");
}

void refuse_without_effect(const std::string& field, double value, double accepted, const std::string& why) {
  if (value == accepted) return;
  char got[32], want[32];
  std::snprintf(got, sizeof got, "%g", value);
  std::snprintf(want, sizeof want, "%g", accepted);
  throw QuantizerConfigError(field + "=" + got + " has no effect here (" + why + "); leave it at " + want);
}

}  // namespace veloxquant::eviction
