#pragma once
// knorm (L2-norm eviction, Devoto et al., "A Simple and Effective L2 Norm-Based Strategy for KV
// Cache Compression", EMNLP 2024, arXiv 2406.11430; spec §6 #30): keys with a low L2 norm draw
// high attention, so over the budget the row whose key has the highest norm is evicted (or the
// lowest, knorm_keep=high), the sinks and the newest knorm_recent rows kept. No attention is
// needed: a row's score is fixed when it arrives (eviction_policy.h kKeyNorm).
#include <memory>
#include <string>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "L2Norm (knorm)").
struct KnormOptions {
  int knorm_budget = 512;
  int knorm_n_sink = 4;
  int knorm_recent = 0;
  std::string knorm_keep = "low";
};

// QuantizerConfigError naming the field and value: budget >= 1, n_sink < budget, n_sink + recent
// < budget, keep in {low, high}; the eviction storage / scoring choices.
void validate_knorm_options(const KVCacheConfig& config);
eviction::EvictionPolicy knorm_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_knorm_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor knorm_method();

}  // namespace veloxquant
