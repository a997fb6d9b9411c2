#pragma once
// The host's native caches in a chosen element type (--kv-dtype), for any model: what
// LlamaModel::native_make_cache() builds for its own type, and what evaluations build to set
// llama.cpp's block types beside the f16 cache of the same model in one run.
#include "lm/cache/cache.h"
#include "lm/cache/kv_cache_type.h"
#include "lm/model.h"

namespace base {
class ThreadPool;
}

namespace lm {

// One cache per layer: full layers get a FullKVCache (float types) or a BlockKVCache (block
// types; fused attention on `pool`, or the global pool when null); sliding-window layers keep
// a RotatingKVCache, in f16 when a block type was asked for (the block cache does not rotate);
// non-attention layers with a LayerInfo::make_state_cache get that state cache.
// Throws base::InvalidArgument when a block type meets a head dim that is not a multiple of 32.
CacheList make_kv_type_caches(const Model& model, KVCacheType type, base::ThreadPool* pool = nullptr);

}  // namespace lm
