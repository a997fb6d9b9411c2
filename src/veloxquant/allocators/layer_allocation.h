#pragma once
// From a sensitivity table (layer_sensitivity.h) to per-layer bit lists under a byte budget:
// every (attention layer, part) is one item of the knapsack (bit_allocation.h) whose choices
// cost what the caches really allocate — nbytes() of that layer's cache fed `rows` rows, so
// scales, blocks and any fixed rows (means, sinks) are counted as the caches count them.
#include <cstdint>
#include <vector>

#include "lm/model.h"
#include "veloxquant/allocators/layer_sensitivity.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant::allocators {

struct LayerAllocation {
  std::vector<std::vector<int>> bits;  // [part][attention layer], table.parts' order
  double predicted_kl = 0.0;           // sum of the chosen items' measured KL
  double bytes_per_token = 0.0;        // nbytes of every layer's cache at `rows` rows / rows
};

// Resident bytes of every attention layer's cache for `config` (lists allowed) after `rows`
// rows of random keys and values, divided by rows: what eval reports as bytes/token at ctx = rows.
double model_bytes_per_token(const lm::Model& model, const KVCacheConfig& config, int64_t rows);

// The allocation of least predicted KL whose bytes per token at `rows` rows stay within
// `budget_bytes_per_token`. Throws base::InvalidArgument when even the cheapest candidates
// exceed it (the message gives both).
LayerAllocation allocate_layer_bits(const lm::Model& model, const SensitivityTable& table, const KVCacheConfig& base,
                                    double budget_bytes_per_token, int64_t rows);

// `base` with each part's field set to its per-layer list.
KVCacheConfig config_with_allocation(const KVCacheConfig& base, const std::vector<LayerPart>& parts,
                                     const std::vector<std::vector<int>>& bits);

}  // namespace veloxquant::allocators
