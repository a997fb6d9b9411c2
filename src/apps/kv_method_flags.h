#pragma once
// A reusable piece for CLI subcommands that run a model: adds
//   --method M   (default "none" = the host's own cache)   --bits B   --seed S
//   --set FIELD=VALUE (repeatable, parsed against the declared field types)
//   --preset q8|q5|q4|q3 (a named configuration at a llama.cpp cache size, presets/kv_presets.h)
// validates them BEFORE the model is loaded (bad input fails fast, no fp16 fallback), and
// wires the chosen cache into a loaded lm::Model through patch_model_kv_cache.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/model.h"
#include "veloxquant/config/kv_cache_config.h"

namespace CLI {
class App;
}

namespace apps {

struct KvMethodFlags {
  std::string method = "none";
  std::string bits;  // "" = the config default; "4" or "2,3,4" (one per attention layer)
  int64_t seed = 42;
  std::vector<std::string> sets;
  std::string preset;  // "" = none; else replaces --method/--bits (--set still applies on top)
};

// Adds the flags. When the command already has a --seed (generate's sampling seed) no second one
// is added: the caller then copies that seed into flags.seed when the user gave it, so one
// --seed drives both (the cache default stays 42).
void add_kv_method_flags(CLI::App& command, KvMethodFlags& flags);

// The config the flags describe, validated as far as possible without a model (method known
// and servable, field names and values, bounds). nullopt for --method none. Irrelevant --set
// fields are reported on stderr as warnings. Throws veloxquant::QuantizerConfigError.
std::optional<veloxquant::KVCacheConfig> kv_config_from_flags(const KvMethodFlags& flags);

// The settings the flags apply, for reports: "preset=q4,key_bits=4,value_bits=4,FIELD=VALUE"
// (the preset's own assignments first, then --set).
std::string kv_settings_text(const KvMethodFlags& flags);

// Installs the compressed cache (patch_model_kv_cache) when a config is given; a no-op for
// nullopt. Returns the method label for reports ("none" or the method name).
std::string apply_kv_method(lm::Model& model, const std::optional<veloxquant::KVCacheConfig>& config);

// Bytes the same tokens would take in a full-precision cache of `dtype` (every attention
// layer, keys and values, no growth slack): the reference next to KV bytes resident.
std::size_t full_precision_kv_bytes(const lm::Model& model, int64_t tokens, lm::DType dtype);

}  // namespace apps
