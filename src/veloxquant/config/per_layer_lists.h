#pragma once
// Per-layer lists in a KVCacheConfig. bit_width_inlier (spec §3.1) and every bit-width option of
// a method (turboquant_block's key_bits / value_bits) may hold one int per *attention* layer
// instead of one int for all; for_model gives attention layer i a copy of the config with each
// list replaced by its entry i, the way the original resolves bit_width_inlier (spec §4.2
// step 7). A single cache always takes ints: lists are refused by validate_for_create.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

struct PerLayerList {
  std::string field;   // "bit_width_inlier", "key_bits", ...
  std::size_t length;  // entries
};

// The list-form fields of `config`, bit_width_inlier first, then its method's options in
// declaration order (none for an unknown method's options).
std::vector<PerLayerList> per_layer_lists(const KVCacheConfig& config);

// Throws QuantizerConfigError naming the field when a list does not have exactly one entry per
// attention layer.
void check_per_layer_lengths(const KVCacheConfig& config, std::size_t n_attention_layers);

// The common length of the lists (none without lists); throws QuantizerConfigError naming two
// fields whose lengths differ. For checks made before the model is known.
std::optional<std::size_t> common_per_layer_length(const KVCacheConfig& config);

// `config` with every list replaced by its entry for attention layer `attention_index` (which
// must be below every list's length: check_per_layer_lengths first).
KVCacheConfig config_for_attention_layer(const KVCacheConfig& config, std::size_t attention_index);

// validate_for_create for a config that may hold lists, without a model: the lists must agree in
// length and each layer's resolved config must be valid (a bad entry is named with its layer).
void validate_per_layer_config(const KVCacheConfig& config);

}  // namespace veloxquant
