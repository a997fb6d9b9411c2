#pragma once
// morphkv (MorphKV, Ghadia et al., "Dialogue without Limits: Constant-Sized KV Caches for Extended
// Responses in LLMs", ICML 2025, arXiv 2503.00979; spec §6 #34): the newest morphkv_window tokens
// keep the rest of the cache alive. At every token each of them attends over the live rows, and a
// row's score is the sum of the attention it gets from that window — recomputed every token, so a
// row that the recent text no longer looks at loses its place. Over the budget the lowest-scored
// row outside the sinks and the window is evicted; morphkv_window 1 is TOVA (eviction_policy.h
// kRecentVotes).
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "MorphKV").
struct MorphKVOptions {
  int morphkv_budget = 512;
  int morphkv_n_sink = 4;
  int morphkv_window = 8;
};

void validate_morphkv_options(const KVCacheConfig& config);
eviction::EvictionPolicy morphkv_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_morphkv_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor morphkv_method();

}  // namespace veloxquant
