#pragma once
// qjl, standalone (QJL, Zandieh et al., AAAI 2025, arXiv 2406.03482; spec §2.4): a Gaussian JL
// sketch of each key (m = jl_dim or d rows, drawn from seed + 1) kept as 1-bit signs plus the
// key norm; <q, k> ~ sqrt(pi/2)/m * |k| * sum_i sign(s_i k)(s_i q). Values int8 per token.
#include <memory>

#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

std::unique_ptr<StandaloneCache> make_qjl_cache(const KVCacheConfig& config);

}  // namespace veloxquant
