#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

std::string KVCacheConfig::to_string() const {
  return "KVCacheConfig(method='" + method + "', d=" + std::to_string(head_dim) +
         ", b=" + bit_width_inlier.to_string() + ", seed=" + std::to_string(seed) + ")";
}

}  // namespace veloxquant
