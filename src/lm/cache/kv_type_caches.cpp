#include "lm/cache/kv_type_caches.h"

#include "lm/cache/block_kv_cache.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/cache/rotating_kv_cache.h"

namespace lm {

CacheList make_kv_type_caches(const Model& model, KVCacheType type, base::ThreadPool* pool) {
  const bool blocks = is_block_kv_type(type);
  const DType float_dtype = blocks ? DType::F16 : kv_feed_dtype(type);
  CacheList caches;
  caches.reserve(model.layers().size());
  for (const LayerInfo& info : model.layers()) {
    if (!info.is_attention && info.make_state_cache) {
      caches.push_back(info.make_state_cache());  // a recurrent state has no KV element type
    } else if (info.sliding_window) {
      caches.push_back(std::make_shared<RotatingKVCache>(*info.sliding_window, 0, float_dtype));
    } else if (blocks) {
      kv_row_bytes(type, info.head_dim > 0 ? info.head_dim : model.config().head_dim);  // refuses 32 ∤ head_dim
      caches.push_back(std::make_shared<BlockKVCache>(type, pool));
    } else {
      caches.push_back(std::make_shared<FullKVCache>(float_dtype));
    }
  }
  return caches;
}

}  // namespace lm
