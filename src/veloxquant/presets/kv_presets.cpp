#include "veloxquant/presets/kv_presets.h"

#include "veloxquant/config/config_validation.h"
#include "veloxquant/errors.h"
#include "veloxquant/registry/field_assignment.h"

namespace veloxquant {

const std::vector<KvPreset>& kv_presets() {
  // bits_per_element: llama.cpp's block formats (32 elements + one f16 scale: b + 0.5 bits).
  static const std::vector<KvPreset> presets = {
      {"q8", "llama.cpp q8_0 K+V", 8.5, "turboquant_block", {"key_bits=8", "value_bits=8"},
       "8-bit keys and values: (8 + 0.5) bits per element"},
      {"q5", "llama.cpp q5_0 K+V", 5.5, "turboquant_block", {"key_bits=5", "value_bits=5"},
       "5-bit keys and values: (5 + 0.5) bits per element"},
      {"q4", "llama.cpp q4_0 K+V", 4.5, "turboquant_block", {"key_bits=4", "value_bits=4"},
       "4-bit keys and values: (4 + 0.5) bits per element"},
      {"q3", "3.5 bits per element (no llama.cpp type)", 3.5, "turboquant_block", {"key_bits=3", "value_bits=3"},
       "3-bit keys and values: (3 + 0.5) bits per element"},
  };
  return presets;
}

const KvPreset& require_kv_preset(std::string_view name) {
  std::string known;
  for (const KvPreset& p : kv_presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw QuantizerConfigError("unknown preset '" + std::string(name) + "'; presets: " + known);
}

KVCacheConfig kv_preset_config(const KvPreset& preset, int64_t seed) {
  KVCacheConfig config;
  config.method = preset.method;
  config.seed = seed;
  for (const std::string& set : preset.sets) apply_field_assignment(config, set);
  validate_for_create(config);
  return config;
}

std::string kv_preset_settings(const KvPreset& preset) {
  std::string out = preset.method;
  for (const std::string& set : preset.sets) out += " " + set;
  return out;
}

}  // namespace veloxquant
