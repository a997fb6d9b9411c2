#pragma once
// Configs of every eviction method with one small budget, for the eviction tests.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "veloxquant/veloxquant.h"

namespace veloxquant::eviction_test {

// Every registered eviction method (the registry's family "eviction"): a new method runs the
// invariants, generation and fused-path tests without being listed here.
inline const std::vector<std::string>& eviction_methods() {
  static const std::vector<std::string> methods = [] {
    std::vector<std::string> names;
    for (const MethodDescriptor& m : method_registry()) {
      if (m.family == "eviction" && m.set_budget) names.push_back(m.name);
    }
    return names;
  }();
  return methods;
}

// `method` keeping `budget` rows per head through its registration's set_budget; h2o protects 4
// rows and snapkv's window is 8 (what the method tests below expect), sinks stay 4.
inline KVCacheConfig small_budget(const std::string& method, int budget, int head_dim = 32) {
  KVCacheConfig c;
  c.method = method;
  c.head_dim = head_dim;
  c.bit_width_inlier = 4;
  c.h2o.h2o_grace = 4;
  c.snapkv.snap_obs_window = 8;
  require_method(method).set_budget(c, budget);
  return c;
}

// Whether a cache of `policy` may hold `rows` after `fed` tokens: all of them up to the budget;
// past it the budget, or as few as budget + 1 - c when evictions remove c rows at once (chunkkv).
inline bool holds_expected_rows(const eviction::EvictionPolicy& policy, int64_t rows, int64_t fed) {
  if (fed <= policy.budget) return rows == fed;
  return rows <= policy.budget && rows >= policy.budget + 1 - policy.rows_evicted_at_once();
}

// Expects `c` to be refused with a QuantizerConfigError whose message holds every word.
inline void expect_config_error(const KVCacheConfig& c, const std::vector<std::string>& words) {
  try {
    validate_for_create(c);
    require_method(c.method).make_serving(c);
    FAIL() << "no error for " << c.to_string();
  } catch (const QuantizerConfigError& e) {
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

inline std::shared_ptr<eviction::EvictionCache> make_eviction_cache(const KVCacheConfig& c) {
  auto cache = std::dynamic_pointer_cast<eviction::EvictionCache>(require_method(c.method).make_serving(c));
  if (!cache) throw std::runtime_error(c.method + " is not an eviction cache");
  return cache;
}

}  // namespace veloxquant::eviction_test
