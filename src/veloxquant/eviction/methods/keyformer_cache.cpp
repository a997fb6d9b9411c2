#include "veloxquant/eviction/methods/keyformer_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {

constexpr const char* kTypeName = "KeyformerCache";

void require_temperature(const char* field, double tau) {
  if (!(std::isfinite(tau) && tau >= 0.0)) {
    throw QuantizerConfigError(std::string(field) + " must be a finite number >= 0, got " + std::to_string(tau));
  }
}

}  // namespace

void validate_keyformer_options(const KVCacheConfig& config) {
  const KeyformerOptions& o = config.options<KeyformerOptions>();
  eviction::require_evictable("keyformer_budget", o.keyformer_budget, "keyformer_n_sink", o.keyformer_n_sink,
                              "keyformer_recent", o.keyformer_recent);
  if (o.keyformer_tau) require_temperature("keyformer_tau", *o.keyformer_tau);
  require_temperature("keyformer_tau_init", o.keyformer_tau_init);
  require_temperature("keyformer_tau_end", o.keyformer_tau_end);
  if (o.keyformer_anneal_steps < 0) {
    throw QuantizerConfigError("keyformer_anneal_steps must be >= 0, got " + std::to_string(o.keyformer_anneal_steps));
  }
  eviction::refuse_without_effect("keyformer_rope_base", o.keyformer_rope_base, KeyformerOptions{}.keyformer_rope_base,
                                  "survivors keep their rotation and position; nothing is re-rotated");
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy keyformer_policy(const KVCacheConfig& config) {
  const KeyformerOptions& o = config.options<KeyformerOptions>();
  eviction::EvictionPolicy p;
  p.kind = eviction::EvictionPolicy::Kind::kAttentionScored;
  p.budget = o.keyformer_budget;
  p.n_sink = o.keyformer_n_sink;
  p.protect_recent = o.keyformer_recent;
  p.decay = 1.0;  // H2O's plain accumulation (the paper's score function)
  p.noise_tau_init = o.keyformer_tau.value_or(o.keyformer_tau_init);
  p.noise_tau_end = o.keyformer_tau.value_or(o.keyformer_tau_end);
  p.noise_anneal_steps = o.keyformer_tau ? 0 : o.keyformer_anneal_steps;
  p.noise_seed = static_cast<uint64_t>(static_cast<int64_t>(o.keyformer_seed));
  return p;
}

std::shared_ptr<lm::KVCache> make_keyformer_cache(const KVCacheConfig& config) {
  validate_keyformer_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, keyformer_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor keyformer_method() {
  MethodDescriptor m = eviction::eviction_method("keyformer", kTypeName);
  m.blurb =
      "H2O's accumulated attention ranked with seeded Gumbel noise frozen per position (temperature tau, "
      "annealed); past keyformer_budget evict the lowest, sinks and the newest keyformer_recent rows kept";
  m.paper =
      "Keyformer: KV Cache Reduction through Key Tokens Selection for Efficient Generative Inference "
      "(Adnan et al., MLSys 2024, arXiv 2403.09054)";
  m.deviations = std::string(
                     "The noise enters the ranking of victims (score + tau * Gumbel), not a softmax over "
                     "the logits as in the paper; it depends on keyformer_seed and the position only, so "
                     "it is the same for every layer, head and call split. Plain accumulation (no "
                     "decay). keyformer_rope_base is refused unless left at its default: survivors are "
                     "never re-rotated.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("keyformer_budget", &KeyformerOptions::keyformer_budget, "Rows kept per head, sinks included", 1),
      option_field("keyformer_n_sink", &KeyformerOptions::keyformer_n_sink, "First positions never evicted", 0),
      option_field("keyformer_recent", &KeyformerOptions::keyformer_recent, "Newest rows never evicted", 0),
      option_field("keyformer_tau", &KeyformerOptions::keyformer_tau,
                   "Constant noise temperature (None = anneal from tau_init to tau_end); 0 = H2O"),
      option_field("keyformer_tau_init", &KeyformerOptions::keyformer_tau_init, "Temperature at position 0"),
      option_field("keyformer_tau_end", &KeyformerOptions::keyformer_tau_end,
                   "Temperature from position keyformer_anneal_steps on"),
      option_field("keyformer_anneal_steps", &KeyformerOptions::keyformer_anneal_steps,
                   "Positions over which tau moves linearly from tau_init to tau_end (0 = tau_end at once)", 0),
      option_field("keyformer_rope_base", &KeyformerOptions::keyformer_rope_base,
                   "The original's re-rotation base; only the default is accepted (survivors keep their rotation)"),
      option_field("keyformer_seed", &KeyformerOptions::keyformer_seed, "Seed of the per-position Gumbel noise"),
  };
  m.validate = validate_keyformer_options;
  m.make_serving = make_keyformer_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    KeyformerOptions& o = c.options<KeyformerOptions>();
    o.keyformer_budget = budget;
    o.keyformer_n_sink = std::min(o.keyformer_n_sink, budget / 4);
    o.keyformer_recent = std::min(o.keyformer_recent, budget / 4);
  };
  return m;
}

}  // namespace veloxquant
