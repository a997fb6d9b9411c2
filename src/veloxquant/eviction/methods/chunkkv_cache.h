#pragma once
// chunkkv (ChunkKV, Liu et al., arXiv 2502.00299; spec §6 #26): tokens are kept or evicted in
// chunks of chunkkv_chunk_size consecutive positions, so the cache keeps whole phrases instead of
// scattered tokens. Rows are scored per token — H2O's accumulated attention (attn_mass) or the
// negated key norm (key_norm, knorm's rule) — and past the budget the complete chunk with the
// lowest mean score goes (eviction_policy.h chunk_size). Chunk size 1 is the H2O scorer exactly.
#include <memory>
#include <string>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "ChunkKV").
struct ChunkKVOptions {
  int chunkkv_budget = 512;
  int chunkkv_chunk_size = 8;
  int chunkkv_n_sink = 4;
  std::string chunkkv_score = "attn_mass";
  int chunkkv_reuse_layers = 1;  // only 1 here: layer index reuse is refused (docs/methods/chunkkv.md)
};

void validate_chunkkv_options(const KVCacheConfig& config);
eviction::EvictionPolicy chunkkv_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_chunkkv_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor chunkkv_method();

}  // namespace veloxquant
