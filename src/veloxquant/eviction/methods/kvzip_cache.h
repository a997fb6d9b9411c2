#pragma once
// kvzip (KVzip, Kim et al., NeurIPS 2025, arXiv 2505.23416; spec §6 #35): a row's reliance is the
// most attention it ever received from one probe (the paper reconstructs the context and keeps
// what any reconstruction query relies on): score = max(score, w) at every step, the new row
// starting at its own weight; over the budget the least relied-on row outside the sinks is
// evicted. kvzip_probe=latest scores by the current step's weight only (= TOVA).
#include <memory>
#include <string>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "KVzip").
struct KVzipOptions {
  int kvzip_budget = 512;
  int kvzip_n_sink = 4;
  std::string kvzip_probe = "context";
};

void validate_kvzip_options(const KVCacheConfig& config);
eviction::EvictionPolicy kvzip_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_kvzip_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor kvzip_method();

}  // namespace veloxquant
