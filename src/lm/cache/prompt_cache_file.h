#pragma once
// Prompt-cache files: a long prompt is processed once, its caches saved, and later
// generations continue from them (mlx_lm's save_prompt_cache / load_prompt_cache, in a
// binary layout of our own).
//
// Layout (little-endian; "str" = u32 byte length + bytes):
//   magic      8 bytes  "VQPCACHE"
//   version    u32      = 1
//   reserved   u32      = 0
//   metadata   u32 count, then count x (str key, str value)      free-form, e.g. model name
//   tokens     u64 count, then count x i32                       the tokens the caches hold
//   caches     u32 count, then per cache:
//                str type_name                                   KVCache::type_name()
//                u32 count, then count x str                     meta_state()
//                u32 count, then per tensor of state():
//                  u8 dtype (lm::DType value), u8 ndim (<= 8), u16 reserved = 0,
//                  ndim x i64 shape, u64 byte count, raw row-major element bytes
//   checksum   u64      FNV-1a 64 over every byte before it
// Loading rebuilds each cache through the cache-type registry below (FullKVCache,
// RotatingKVCache, BlockKVCache and ConvStateCache are registered; other libraries add theirs)
// and from_state().
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/generate.h"

namespace lm {

inline constexpr char kPromptCacheMagic[8] = {'V', 'Q', 'P', 'C', 'A', 'C', 'H', 'E'};
inline constexpr uint32_t kPromptCacheVersion = 1;

// Makes an empty cache of one type; from_state() then restores it.
using CacheFactory = std::function<std::shared_ptr<KVCache>()>;
// Registers (or replaces) the factory for `type_name`. Thread-safe.
void register_cache_type(const std::string& type_name, CacheFactory factory);
// A new empty cache of that type; base::Unsupported naming the type and the registered ones
// when unknown.
std::shared_ptr<KVCache> make_cache_of_type(const std::string& type_name);
std::vector<std::string> registered_cache_types();

struct SavedPromptCache {
  PromptCache cache;  // caches + the tokens they hold
  std::map<std::string, std::string> metadata;
};

// Writes atomically (a temporary file renamed over `path`). Throws base::InvalidArgument for
// an empty or null cache list, or when the caches disagree with the token count;
// base::FormatError when the file cannot be written.
void save_prompt_cache(const std::string& path, const PromptCache& cache,
                       const std::map<std::string, std::string>& metadata = {});
// Throws base::FormatError naming the file and the problem for a missing, truncated or
// corrupt file (bad magic, checksum, shapes, counts), base::Unsupported for a newer version
// or an unregistered cache type.
SavedPromptCache load_prompt_cache(const std::string& path);

// The trailing 8-byte checksum (FNV-1a, 64-bit) a prompt-cache file carries after its other
// `size` bytes. For tools that build or mutate files on purpose (the fuzz target seals its
// mutants with it so they reach the parser behind the checksum).
uint64_t prompt_cache_checksum(const void* data, std::size_t size);

}  // namespace lm
