#include "lm/cache/cache.h"

#include "base/error.h"

namespace lm {

AttentionMask default_attention_mask(int64_t n_queries, std::optional<int64_t> window) {
  if (n_queries <= 1 && !window) return AttentionMask::none();
  return AttentionMask::causal();
}

void KVCache::fused_attention(const FusedAttentionRequest&, Tensor&) {
  throw base::Unsupported(type_name() + " does not offer fused attention");
}

}  // namespace lm
