#pragma once
// The explicit attention mask of an eviction cache (spec §2.3, the original's
// cache/_eviction_mask.py). Once eviction made the kept positions non-contiguous the host's
// "causal" rule (query i sees keys j <= T - N + i) is wrong, so the cache states visibility by
// true positions: key j is visible to query i iff key_pos[j] <= query_pos[i] and, with a
// window, query_pos[i] < key_pos[j] + window; query positions are first .. first + N - 1.
//
// The host's mask has one head dimension, so every head uses head 0's kept positions. Without a
// window that is exact: the stored rows are all older than every query (visible to all of them)
// and the call's new rows are the same positions in every head. With a window, heads whose kept
// rows differ from head 0's near the window edge get head 0's visibility (the original's
// accepted limitation).
#include <cstdint>
#include <optional>
#include <vector>

#include "lm/cache/cache.h"

namespace veloxquant::eviction {

// key_positions[b]: the true positions of the T rows returned for batch element b, in order.
// Returns kExplicit, U8 [B, 1, n_queries, T].
lm::AttentionMask positional_mask(const std::vector<std::vector<int64_t>>& key_positions, int64_t first_query,
                                  int64_t n_queries, std::optional<int64_t> window);

}  // namespace veloxquant::eviction
