#include "veloxquant/eviction/methods/chunkkv_cache.h"

#include <algorithm>
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"

namespace veloxquant {

namespace {

constexpr const char* kTypeName = "ChunkKVCache";

// Rows that can never be evicted as a whole chunk: the chunks the sinks touch.
int sink_chunk_rows(int n_sink, int chunk) { return (n_sink + chunk - 1) / chunk * chunk; }

}  // namespace

void validate_chunkkv_options(const KVCacheConfig& config) {
  const ChunkKVOptions& o = config.options<ChunkKVOptions>();
  eviction::require_evictable("chunkkv_budget", o.chunkkv_budget, "chunkkv_n_sink", o.chunkkv_n_sink);
  if (o.chunkkv_chunk_size < 1) {
    throw QuantizerConfigError("chunkkv_chunk_size must be >= 1, got " + std::to_string(o.chunkkv_chunk_size));
  }
  // A full cache must always hold one complete chunk outside the sinks' chunks and the newest,
  // still incomplete one.
  const int needed = sink_chunk_rows(o.chunkkv_n_sink, o.chunkkv_chunk_size) + 2 * o.chunkkv_chunk_size;
  if (o.chunkkv_budget < needed) {
    throw QuantizerConfigError("chunkkv_budget=" + std::to_string(o.chunkkv_budget) + " must be at least " +
                               std::to_string(needed) + " (chunkkv_n_sink=" + std::to_string(o.chunkkv_n_sink) +
                               " rounded up to whole chunks + 2 x chunkkv_chunk_size=" +
                               std::to_string(o.chunkkv_chunk_size) + "): nothing would be evictable");
  }
  if (o.chunkkv_score != "attn_mass" && o.chunkkv_score != "key_norm") {
    throw QuantizerConfigError("chunkkv_score must be 'attn_mass' or 'key_norm', got '" + o.chunkkv_score + "'");
  }
  if (o.chunkkv_reuse_layers != 1) {
    throw QuantizerConfigError("chunkkv_reuse_layers=" + std::to_string(o.chunkkv_reuse_layers) +
                               " is not supported here: layer index reuse is not implemented, every layer selects "
                               "its own chunks; leave it at 1");
  }
  eviction::validate_storage_and_scoring(config);
}

eviction::EvictionPolicy chunkkv_policy(const KVCacheConfig& config) {
  const ChunkKVOptions& o = config.options<ChunkKVOptions>();
  eviction::EvictionPolicy p;
  p.kind = o.chunkkv_score == "key_norm" ? eviction::EvictionPolicy::Kind::kKeyNorm
                                         : eviction::EvictionPolicy::Kind::kAttentionScored;
  p.key_norm_sign = -1;  // key_norm: low norms are kept (knorm's rule), chunk by chunk
  p.budget = o.chunkkv_budget;
  p.n_sink = o.chunkkv_n_sink;
  p.decay = 1.0;  // the original's H2O scorer
  p.chunk_size = o.chunkkv_chunk_size;
  return p;
}

std::shared_ptr<lm::KVCache> make_chunkkv_cache(const KVCacheConfig& config) {
  validate_chunkkv_options(config);
  return std::make_shared<eviction::EvictionCache>(kTypeName, chunkkv_policy(config), eviction::storage_of(config),
                                                   eviction::scoring_of(config));
}

MethodDescriptor chunkkv_method() {
  MethodDescriptor m = eviction::eviction_method("chunkkv", kTypeName);
  m.blurb =
      "Whole chunks of chunkkv_chunk_size positions are evicted, the one with the lowest mean score (H2O "
      "attention mass or key norm); chunk size 1 = the H2O scorer";
  m.paper =
      "ChunkKV: Semantic-Preserving KV Cache Compression for Efficient Long-Context LLM Inference (Liu et al., "
      "arXiv 2502.00299)";
  m.deviations = std::string(
                     "Chunks are aligned to absolute positions; the chunks touching the sinks are never "
                     "evicted. Eviction is continuous: past the budget one whole chunk goes, so a full "
                     "cache holds between budget + 1 - chunk_size and budget rows (the paper selects "
                     "chunks once per prompt). chunkkv_reuse_layers (layer-wise index reuse) is refused "
                     "above 1: not implemented. A decode step takes the general selection path.") +
                 eviction::kCompositionNote;
  m.fields = {
      option_field("chunkkv_budget", &ChunkKVOptions::chunkkv_budget, "Rows kept per head at most, sinks included", 1),
      option_field("chunkkv_chunk_size", &ChunkKVOptions::chunkkv_chunk_size,
                   "Consecutive positions evicted together; 1 = the H2O scorer", 1),
      option_field("chunkkv_n_sink", &ChunkKVOptions::chunkkv_n_sink, "First positions never evicted", 0),
      option_field("chunkkv_score", &ChunkKVOptions::chunkkv_score,
                   "attn_mass (H2O accumulated attention) or key_norm (low key norms kept)"),
      option_field("chunkkv_reuse_layers", &ChunkKVOptions::chunkkv_reuse_layers,
                   "Layers sharing one layer's chunk choice; only 1 (not implemented here)", 1),
  };
  m.validate = validate_chunkkv_options;
  m.make_serving = make_chunkkv_cache;
  m.set_budget = [](KVCacheConfig& c, int budget) {
    ChunkKVOptions& o = c.options<ChunkKVOptions>();
    o.chunkkv_budget = budget;
    o.chunkkv_n_sink = std::min(o.chunkkv_n_sink, budget / 4);
    o.chunkkv_chunk_size = std::max(1, std::min(o.chunkkv_chunk_size, budget / 8));
  };
  return m;
}

}  // namespace veloxquant
