#pragma once
// qfilters (Q-Filters, Godey et al., arXiv 2503.02812; spec §6 #32): attention logits are
// dominated by one direction of the query/key space, so a key's projection on that direction
// predicts the attention it draws without computing any. Each kv head estimates the direction
// once — the top right singular vector of its first qfilters_calib_tokens keys — and scores every
// row by qfilters_sign * <k, u> (fixed); past the budget the lowest-scored row outside the sinks
// and the newest qfilters_recent rows is evicted (eviction_policy.h kDirection). The original's
// retention floor is kept: when budget / tokens fed first drops below qfilters_min_retention it
// warns once, raises, or stays quiet (qfilters_on_low_retention).
#include <memory>
#include <optional>
#include <string>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "Q-Filters").
struct QFiltersOptions {
  int qfilters_budget = 512;
  int qfilters_n_sink = 4;
  int qfilters_recent = 0;
  int qfilters_calib_tokens = 128;
  int qfilters_sign = 1;
  std::optional<double> qfilters_min_retention = 0.9;
  std::string qfilters_on_low_retention = "warn";
};

void validate_qfilters_options(const KVCacheConfig& config);
eviction::EvictionPolicy qfilters_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_qfilters_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor qfilters_method();

}  // namespace veloxquant
