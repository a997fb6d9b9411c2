#pragma once
// polar, standalone (PolarQuant, Han et al., AISTATS 2026, arXiv 2502.02617; spec §2.4): the
// key's recursive polar transform, angles quantized with per-level Lloyd-Max codebooks, the
// final radius in f16. Values int8 per token.
#include <memory>

#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

std::unique_ptr<StandaloneCache> make_polar_cache(const KVCacheConfig& config);

}  // namespace veloxquant
