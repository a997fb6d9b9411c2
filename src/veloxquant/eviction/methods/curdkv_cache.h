#pragma once
// curdkv (CurDKV, Sengupta et al., NeurIPS 2025, arXiv 2509.15038; spec §6 #37): value-aware
// eviction. Each token's attention weights over the stored rows scale their values into the
// block diag(w) V (each row's contribution to the attention output); a row's leverage in that
// block's top curdkv_rank_cap singular directions (eviction/leverage_scores.h) adds to its
// score, a new row starts at its own leverage. Past curdkv_budget the row with the lowest mean
// leverage per step is evicted, the sinks kept (eviction_policy.h kLeverage). Two rows with the
// same key but different values score differently — what no key-only rule can do.
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "CurDKV").
struct CurDKVOptions {
  int curdkv_budget = 512;
  int curdkv_n_sink = 4;
  int curdkv_rank_cap = 16;
  double curdkv_rope_base = 10000.0;  // only the default: survivors are never re-rotated
};

// QuantizerConfigError naming field and value: budget >= 1, n_sink < budget, rank_cap >= 1,
// rope_base refused unless left at its default; the eviction storage / scoring choices.
void validate_curdkv_options(const KVCacheConfig& config);
eviction::EvictionPolicy curdkv_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_curdkv_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor curdkv_method();

}  // namespace veloxquant
