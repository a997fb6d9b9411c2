// The method table of the cmake/tsan_pooled_caches.cmake build only (never part of the regular
// library): the rows of the caches that library holds (every quantization cache with fused
// attention), each the cache's own
// registry row, so KVCacheBuilder builds them exactly as the full table does. The full table
// (src/veloxquant/registry/method_table.cpp) names every cache and would link all of them.
#include <vector>

#include "veloxquant/caches/a2ats_cache.h"
#include "veloxquant/caches/age_tiered_cache.h"
#include "veloxquant/caches/amc_cache.h"
#include "veloxquant/caches/anchorkv_cache.h"
#include "veloxquant/caches/cachegen_cache.h"
#include "veloxquant/caches/comm_vq_cache.h"
#include "veloxquant/caches/kitty_cache.h"
#include "veloxquant/caches/kvtc_cache.h"
#include "veloxquant/caches/palu_cache.h"
#include "veloxquant/caches/svdq_cache.h"
#include "veloxquant/caches/vecinfer_cache.h"
#include "veloxquant/caches/zipcache_cache.h"
#include "veloxquant/caches/adakv_cache.h"
#include "veloxquant/caches/gear_cache.h"
#include "veloxquant/caches/kivi_cache.h"
#include "veloxquant/caches/kivi_sink_cache.h"
#include "veloxquant/caches/kvquant_cache.h"
#include "veloxquant/caches/nsnquant_cache.h"
#include "veloxquant/caches/skvq_cache.h"
#include "veloxquant/caches/turboquant_block_cache.h"
#include "veloxquant/caches/turboquant_rvq_cache.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant {

std::vector<MethodDescriptor> build_method_table() {
  return {kivi_method(),       kivi_sink_method(), kvquant_method(),
          gear_method(),       skvq_method(),      nsnquant_method(),
          adakv_method(),      a2ats_method(),     turboquant_block_method(),
          age_tiered_method(), amc_method(),       anchorkv_method(),
          cachegen_method(),   comm_vq_method(),   kitty_method(),
          kvtc_method(),       palu_method(),      svdq_method(),
          vecinfer_method(),   zipcache_method(), turboquant_rvq_method()};
}

}  // namespace veloxquant
