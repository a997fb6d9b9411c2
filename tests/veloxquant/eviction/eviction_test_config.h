#pragma once
// Configs of the five eviction methods with one small budget, for the eviction tests.
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/veloxquant.h"

namespace veloxquant::eviction_test {

inline const std::vector<std::string>& eviction_methods() {
  static const std::vector<std::string> methods = {"streaming_llm", "h2o", "tova", "snapkv", "pyramidkv"};
  return methods;
}

// Every method keeps `budget` rows per head (4 sinks); h2o protects 4 rows, snapkv's window is 8.
inline KVCacheConfig small_budget(const std::string& method, int budget, int head_dim = 32) {
  KVCacheConfig c;
  c.method = method;
  c.head_dim = head_dim;
  c.bit_width_inlier = 4;
  c.streaming_llm.stream_n_sink = 4;
  c.streaming_llm.stream_window_size = budget - 4;
  c.h2o.h2o_budget = budget;
  c.h2o.h2o_grace = 4;
  c.tova.tova_budget = budget;
  c.snapkv.snap_budget = budget;
  c.snapkv.snap_obs_window = 8;
  c.pyramidkv.pyramid_budget = budget;
  return c;
}

inline std::shared_ptr<eviction::EvictionCache> make_eviction_cache(const KVCacheConfig& c) {
  auto cache = std::dynamic_pointer_cast<eviction::EvictionCache>(require_method(c.method).make_serving(c));
  if (!cache) throw std::runtime_error(c.method + " is not an eviction cache");
  return cache;
}

}  // namespace veloxquant::eviction_test
