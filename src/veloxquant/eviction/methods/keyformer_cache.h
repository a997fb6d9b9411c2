#pragma once
// keyformer (Keyformer, Adnan et al., MLSys 2024, arXiv 2403.09054; spec §6 #33): H2O's
// accumulated attention, but victims are ranked by score + tau * g(position), g a standard
// Gumbel sample frozen per position (seeded): the paper's Gumbel-softmax regularisation of the
// key scores, which keeps the selection from locking onto early heavy hitters. tau anneals from
// keyformer_tau_init to keyformer_tau_end over keyformer_anneal_steps tokens, or stays
// keyformer_tau when that is set; tau = 0 is H2O without decay (eviction_policy.h).
#include <memory>
#include <optional>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "Keyformer").
struct KeyformerOptions {
  int keyformer_budget = 512;
  int keyformer_n_sink = 4;
  int keyformer_recent = 0;
  std::optional<double> keyformer_tau;  // set: a constant temperature that overrides annealing
  double keyformer_tau_init = 1.0;
  double keyformer_tau_end = 1.0;
  int keyformer_anneal_steps = 0;
  double keyformer_rope_base = 10000.0;  // only the default: survivors are never re-rotated
  int keyformer_seed = 0;
};

void validate_keyformer_options(const KVCacheConfig& config);
eviction::EvictionPolicy keyformer_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_keyformer_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor keyformer_method();

}  // namespace veloxquant
