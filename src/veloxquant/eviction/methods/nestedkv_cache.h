#pragma once
// nestedkv (NestedKV, Chen et al., preprint arXiv 2605.26678; spec §6 #38): key-only eviction by
// three anchors. Every key is compared with the mean of all keys (stable memory), of its block
// (episodic) and of the nestedkv_window keys before it (current); the three anomalies are blended
// per head by how well each separates that head's keys, and a surprise gate routes a key to its
// strongest anomaly when the scales disagree (eviction/anchor_scores.h). The sinks and the most
// anomalous keys fill nestedkv_budget rows per head (eviction_policy.h kAnchors).
#include <memory>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "NestedKV").
struct NestedKVOptions {
  int nestedkv_budget = 512;  // per head
  int nestedkv_n_sink = 4;
  int nestedkv_window = 64;
  double nestedkv_beta = 3.0;
  double nestedkv_tau = 0.60;
  double nestedkv_kappa = 10.0;
  double nestedkv_safeguard_alpha = 0.20;  // only the default: heads keep equal budgets here
};

// QuantizerConfigError naming field and value: budget >= 1, n_sink < budget, window >= 1, beta,
// tau, kappa finite, safeguard_alpha in [0, 1] and refused unless left at its default.
void validate_nestedkv_options(const KVCacheConfig& config);
eviction::EvictionPolicy nestedkv_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_nestedkv_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor nestedkv_method();

}  // namespace veloxquant
