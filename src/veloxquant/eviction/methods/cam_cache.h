#pragma once
// cam (CaM: Cache Merging for Memory-efficient LLMs Inference, Zhang et al., ICML 2024; spec §6
// #27): H2O's scorer picks the victim, but instead of dropping it its value (and, with
// cam_merge_keys, its key) is blended into the live row whose key is most cosine-similar, after a
// Bernoulli gate with probability min(1, victim score / target score) (eviction_policy.h
// "merge"). cam_merge=drop is the plain H2O scorer.
#include <memory>
#include <string>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "CaM").
struct CaMOptions {
  int cam_budget = 512;
  int cam_n_sink = 4;
  std::string cam_merge = "sim_weighted";
  bool cam_merge_keys = false;
  bool cam_merge_gate = true;
};

void validate_cam_options(const KVCacheConfig& config);
eviction::EvictionPolicy cam_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_cam_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor cam_method();

}  // namespace veloxquant
