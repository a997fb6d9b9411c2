#include "veloxquant/caches/polar_cache.h"

#include "veloxquant/caches/quantizer_standalone_cache.h"
#include "veloxquant/quant/polar.h"

namespace veloxquant {

std::unique_ptr<StandaloneCache> make_polar_cache(const KVCacheConfig& config) {
  return std::make_unique<QuantizerStandaloneCache>(
      config, std::make_unique<quant::Polar>(config.head_dim, config.bit_width_inlier.scalar(),
                                             static_cast<uint64_t>(config.seed)));
}

}  // namespace veloxquant
