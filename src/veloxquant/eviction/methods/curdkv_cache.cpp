#include "veloxquant/eviction/methods/curdkv_cache.h"

#include <algorithm>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "CurDKVCache";
}  // namespace

void validate_curdkv_options(const KVCacheConfig& config) {
  const CurDKVOptions& o = config.options<CurDKVOptions>();
  eviction::require_evictable("curdkv_budget", o.curdkv_budget, "curdkv_n_sink", o.curdkv_n_sink);
  if (o.curdkv_rank_cap < 1) {
    throw QuantizerConfigError("curdkv_rank_cap must be >= 1, got " + std::to_string(o.curdkv_rank_cap));
  }
  eviction::refuse_without_effect("curdkv_rope_base", o.curdkv_rope_base, CurDKVOptions{}.curdkv_rope_base,
                                  "survivors keep their rotation and position; nothing is re-rotated");
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy curdkv_policy(const KVCacheConfig& config) {
  const CurDKVOptions& o = config.options<CurDKVOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kLeverage;
  p.budget = o.curdkv_budget;
  p.n_sink = o.curdkv_n_sink;
  p.rank_cap = o.curdkv_rank_cap;
  return p;
}

std::shared_ptr<lm::KVCache> make_curdkv_cache(const KVCacheConfig& config) {
  validate_curdkv_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, curdkv_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor curdkv_method() {
  MethodDescriptor m = eviction::eviction_method("curdkv", kTypeName);
  m.blurb =
      "Value-aware leverage: each token's attention-weighted values, projected on their top curdkv_rank_cap "
      "singular directions, score the rows; past curdkv_budget evict the lowest mean score per step, sinks kept";
  m.paper =
      "CurDKV: Value-Guided KV Compression for LLMs via Approximated CUR Decomposition (Sengupta, Chaudhary, "
      "Chakraborty, NeurIPS 2025, arXiv 2509.15038)";
  m.deviations = std::string(
                     "The original's adaptation: leverage from an exact eigen-decomposition of the "
                     "attention-weighted value block's Gram matrix (rank <= curdkv_rank_cap, energy "
                     "weighted), accumulated per token and compared per step, instead of the paper's CUR "
                     "sampling of keys and values once per prompt. curdkv_rope_base is refused unless "
                     "left at its default: survivors are never re-rotated. A decode step takes the general "
                     "selection path (it needs every stored value).") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("curdkv_budget", &CurDKVOptions::curdkv_budget, "Rows kept per head, sinks included", 1),
      option_field("curdkv_n_sink", &CurDKVOptions::curdkv_n_sink, "First positions never evicted", 0),
      option_field("curdkv_rank_cap", &CurDKVOptions::curdkv_rank_cap,
                   "Singular directions of the attention-weighted value block that count", 1),
      option_field("curdkv_rope_base", &CurDKVOptions::curdkv_rope_base,
                   "The original's re-rotation base; only the default is accepted (survivors keep their rotation)"),
  };
  m.validate = validate_curdkv_options;
  m.make_serving = make_curdkv_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    CurDKVOptions& o = c.options<CurDKVOptions>();
    o.curdkv_budget = budget;
    o.curdkv_n_sink = std::min(o.curdkv_n_sink, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
