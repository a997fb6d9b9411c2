#include "veloxquant/integration/prompt_cache_types.h"

#include <mutex>

#include "lm/prompt_cache_file.h"
#include "veloxquant/eviction/methods/h2o_cache.h"
#include "veloxquant/caches/kivi_cache.h"
#include "veloxquant/cross_layer/minicache_cache.h"
#include "veloxquant/eviction/methods/pyramidkv_cache.h"
#include "veloxquant/eviction/methods/snapkv_cache.h"
#include "veloxquant/eviction/methods/streaming_llm_cache.h"
#include "veloxquant/eviction/methods/tova_cache.h"
#include "veloxquant/caches/turboquant_block_cache.h"
#include "veloxquant/caches/turboquant_rvq_cache.h"
#include "veloxquant/cross_layer/xquant_cache.h"

namespace veloxquant::integration {

void register_prompt_cache_types() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
    lm::register_cache_type("TurboQuantRvqCache", [] { return std::make_shared<TurboQuantRvqCache>(2, 1, 0); });
    lm::register_cache_type("TurboQuantBlockCache", [] { return std::make_shared<TurboQuantBlockCache>(32, 4, 4, 0); });
    lm::register_cache_type("KiviCache", [] { return std::make_shared<KiviCache>(1, 2, 32, 0); });
    // Eviction caches: a default-config placeholder; from_state restores policy and storage.
    lm::register_cache_type("StreamingLLMCache", [] { return std::make_shared<StreamingLLMCache>(KVCacheConfig{}); });
    lm::register_cache_type("H2OCache", [] { return std::make_shared<H2OCache>(KVCacheConfig{}); });
    lm::register_cache_type("TovaCache", [] { return std::make_shared<TovaCache>(KVCacheConfig{}); });
    lm::register_cache_type("SnapKVCache", [] { return std::make_shared<SnapKVCache>(KVCacheConfig{}); });
    lm::register_cache_type("PyramidKVCache", [] { return std::make_shared<PyramidKVCache>(KVCacheConfig{}); });
    // Restored alone (no coordinator): a reuse / merge layer keeps what it saved and handles
    // later tokens as a layer whose leader published nothing.
    lm::register_cache_type("XQuantCache", [] { return std::make_shared<XQuantCache>(2, 0, 32); });
    lm::register_cache_type("MiniCacheCache", [] { return std::make_shared<MiniCacheCache>(MiniCacheMergeOptions{}); });
  });
}

}  // namespace veloxquant::integration
