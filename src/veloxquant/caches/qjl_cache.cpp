#include "veloxquant/caches/qjl_cache.h"

#include "veloxquant/caches/quantizer_standalone_cache.h"
#include "veloxquant/quant/qjl.h"

namespace veloxquant {

std::unique_ptr<StandaloneCache> make_qjl_cache(const KVCacheConfig& config) {
  // m = jl_dim, defaulting to d (spec §2.4).
  return std::make_unique<QuantizerStandaloneCache>(
      config,
      std::make_unique<quant::Qjl>(config.head_dim, config.bit_width_inlier.scalar(),
                                   static_cast<uint64_t>(config.seed), config.jl_dim.value_or(config.head_dim)));
}

}  // namespace veloxquant
