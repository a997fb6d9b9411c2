#include "apps/serve/prefix_cache_pool.h"

#include <algorithm>

#include "lm/stats.h"

namespace apps::serve {

namespace {

bool all_trimmable(const lm::CacheList& caches) {
  return std::all_of(caches.begin(), caches.end(), [](const auto& c) { return c && c->is_trimmable(); });
}

std::size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

std::optional<lm::PromptCache> PrefixCachePool::take(const std::string& key, const std::vector<int32_t>& prompt) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled()) return std::nullopt;
  auto best = entries_.end();
  std::size_t best_keep = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->key != key) continue;
    const std::vector<int32_t>& held = it->state.tokens;
    const std::size_t common = common_prefix(held, prompt);
    // Trimmable caches roll back whatever follows the shared prefix; untrimmable ones continue
    // only from an exact strict prefix.
    const bool usable = all_trimmable(it->state.caches) || (common == held.size() && held.size() < prompt.size());
    const std::size_t keep = usable ? common : 0;
    if (keep > best_keep) {
      best_keep = keep;
      best = it;
    }
  }
  if (best == entries_.end()) {
    ++counters_.misses;
    return std::nullopt;
  }
  lm::PromptCache state = std::move(best->state);
  counters_.bytes -= best->bytes;
  entries_.erase(best);
  const std::size_t drop = state.tokens.size() - best_keep;
  if (drop > 0) {
    for (auto& cache : state.caches) cache->trim(static_cast<int64_t>(drop));
    state.tokens.resize(best_keep);
  }
  ++counters_.hits;
  counters_.tokens_reused += best_keep;
  counters_.entries = entries_.size();
  return state;
}

void PrefixCachePool::put(const std::string& key, lm::PromptCache&& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled() || state.tokens.empty()) return;
  const std::size_t bytes = lm::kv_bytes_resident(state.caches);
  if (bytes > max_bytes_) return;
  entries_.push_front(Entry{key, std::move(state), bytes});
  counters_.bytes += bytes;
  evict_locked();
  counters_.entries = entries_.size();
}

void PrefixCachePool::evict_locked() {
  while (!entries_.empty() && (entries_.size() > max_entries_ || counters_.bytes > max_bytes_)) {
    counters_.bytes -= entries_.back().bytes;
    entries_.pop_back();
  }
}

PrefixCacheCounters PrefixCachePool::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace apps::serve
