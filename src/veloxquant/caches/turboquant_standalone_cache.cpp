#include "veloxquant/caches/turboquant_standalone_cache.h"

#include "veloxquant/caches/quantizer_standalone_cache.h"
#include "veloxquant/quant/turboquant_mse.h"
#include "veloxquant/quant/turboquant_prod.h"

namespace veloxquant {

std::unique_ptr<StandaloneCache> make_turboquant_standalone_cache(const KVCacheConfig& config, bool prod) {
  const int bits = config.bit_width_inlier.scalar();
  const auto seed = static_cast<uint64_t>(config.seed);
  std::unique_ptr<quant::Quantizer> q;
  if (prod) {
    // jl_dim unset = the quantizer's default sketch size (m_default).
    q = std::make_unique<quant::TurboQuantProd>(config.head_dim, bits, seed, config.jl_dim.value_or(0));
  } else {
    q = std::make_unique<quant::TurboQuantMse>(config.head_dim, bits, seed);
  }
  return std::make_unique<QuantizerStandaloneCache>(config, std::move(q), config.enable_outlier_two_stream);
}

}  // namespace veloxquant
