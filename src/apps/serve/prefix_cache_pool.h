#pragma once
// Prefix reuse for `veloxquant serve`: a bounded pool (by entries and by resident bytes) of
// finished requests' caches, kept in their compressed form with the tokens they hold. A new
// request whose prompt shares a prefix with an entry made by the same cache configuration takes
// that entry over (moved out, so two requests never share one cache), rolls it back to the
// common prefix with trim() and prefills only the rest: a multi-turn chat does not re-prefill
// its history. Caches that cannot be trimmed (eviction) are reused only when the entry's tokens
// are a strict prefix of the new prompt. Least recently used entries leave first.
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lm/generate.h"

namespace apps::serve {

struct PrefixCacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t tokens_reused = 0;
  std::size_t entries = 0;
  std::size_t bytes = 0;  // resident bytes of the caches held (nbytes())
};

class PrefixCachePool {
 public:
  PrefixCachePool(std::size_t max_entries, std::size_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  bool enabled() const { return max_entries_ > 0 && max_bytes_ > 0; }

  // The entry of `key` sharing the longest usable prefix with `prompt`, moved out of the pool
  // and rolled back to that prefix; nullopt (a miss) when none shares at least one token.
  std::optional<lm::PromptCache> take(const std::string& key, const std::vector<int32_t>& prompt);

  // Stores a finished request's caches (evicting least recently used entries to stay within
  // both bounds; an entry larger than the byte bound alone is dropped).
  void put(const std::string& key, lm::PromptCache&& state);

  PrefixCacheCounters counters() const;

 private:
  struct Entry {
    std::string key;
    lm::PromptCache state;
    std::size_t bytes = 0;
  };
  void evict_locked();

  std::size_t max_entries_;
  std::size_t max_bytes_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // front = most recently used
  PrefixCacheCounters counters_;
};

}  // namespace apps::serve
