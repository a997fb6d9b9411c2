#pragma once
// turboquant_mse / turboquant_prod, standalone (TurboQuant, Zandieh et al., ICLR 2026, arXiv
// 2504.19874; spec §2.4): keys quantized by the TurboQuant quantizers of quant/ (MSE: rotation +
// b-bit Lloyd-Max; prod: (b-1)-bit MSE stage + 1-bit QJL of the residual + f16 residual norm,
// an unbiased inner-product estimator), values int8 per token.
#include <memory>

#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

std::unique_ptr<StandaloneCache> make_turboquant_standalone_cache(const KVCacheConfig& config, bool prod);

}  // namespace veloxquant
