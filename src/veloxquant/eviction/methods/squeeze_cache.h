#pragma once
// squeeze (SqueezeAttention, Wang et al., arXiv 2404.04793; spec §6 #25, §4.3): the H2O scorer
// (no decay; the newest squeeze_grace rows kept, new here) with per-layer budgets that follow the
// data: on its first call each attention layer reports how concentrated its keys are, and once
// every layer has reported the average budget squeeze_budget is reallocated toward layers whose
// keys spread out (eviction/squeeze_schedule.h). A layer runs at squeeze_budget until the
// schedule is resolved, then at its own budget: rows past it are evicted by their scores and the
// storage is reallocated for exactly that budget. A cache built alone (no model) keeps
// squeeze_resolved_budget or squeeze_budget.
#include <cstddef>
#include <memory>
#include <optional>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"
#include "veloxquant/eviction/squeeze_schedule.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "SqueezeAttention"), plus squeeze_grace.
struct SqueezeOptions {
  int squeeze_budget = 512;
  int squeeze_n_sink = 4;
  double squeeze_strength = 1.0;
  std::optional<int> squeeze_resolved_budget;  // this layer's budget, fixed (None: the schedule decides)
  int squeeze_grace = 16;                      // new: newest rows never evicted (0 = the original)
};

class SqueezeCache final : public eviction::EvictionCache {
 public:
  // `schedule` null: no model-wide schedule, the budget stays as configured.
  SqueezeCache(const KVCacheConfig& config, std::shared_ptr<eviction::SqueezeSchedule> schedule,
               std::size_t attention_index);
  std::shared_ptr<lm::KVCache> clone() const override { return clone_as(*this); }

 protected:
  void before_update(const lm::Tensor& keys) override;

 private:
  std::shared_ptr<eviction::SqueezeSchedule> schedule_;
  std::size_t layer_ = 0;
  bool reported_ = false;
  bool resolved_ = false;
};

// QuantizerConfigError naming field and value: budget >= 1, n_sink + grace below the budget,
// squeeze_strength in [0, 1] (the original's ValueError), a resolved budget above the sinks.
void validate_squeeze_options(const KVCacheConfig& config);
eviction::EvictionPolicy squeeze_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_squeeze_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor squeeze_method();

}  // namespace veloxquant
