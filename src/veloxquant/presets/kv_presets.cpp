#include "veloxquant/presets/kv_presets.h"

#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/per_layer_lists.h"
#include "veloxquant/errors.h"
#include "veloxquant/registry/field_assignment.h"

namespace veloxquant {

const std::vector<KvPreset>& kv_presets() {
  // bits_per_element: llama.cpp's block formats (32 elements + one f16 scale: b + 0.5 bits).
  // What each resolves to was measured on SmolLM2-135M (docs/frontier.md): keys dominate the
  // KL (3-bit keys + 3-bit values 0.138, 5-bit keys + 3-bit values 0.023, 4 + 2: 0.16 on one
  // window), so budgets go to the keys first, as long as values keep at least 3 bits.
  static const std::vector<KvPreset> presets = {
      {"q8",
       "llama.cpp q8_0 K+V",
       8.5,
       "turboquant_block",
       {"key_bits=8", "value_bits=8"},
       "8-bit keys and values, blocks of 32: exactly q8_0's 8.5 bits per element"},
      {"q5",
       "llama.cpp q5_0 K+V",
       5.5,
       "turboquant_block",
       {"key_bits=6", "value_bits=4"},
       "6-bit keys, 4-bit values, blocks of 32: (6.5 + 4.5) / 2 = q5_0's 5.5 bits per element"},
      {"q4",
       "llama.cpp q4_0 K+V",
       4.5,
       "turboquant_block",
       {"key_bits=5", "value_bits=3"},
       "5-bit keys, 3-bit values, blocks of 32: (5.5 + 3.5) / 2 = q4_0's 4.5 bits per element"},
      {"q3",
       "3.5 bits per element (no llama.cpp type)",
       3.5,
       "turboquant_block",
       {"key_bits=3", "value_bits=3", "value_block=64", "mean_rows=256", "sink_rows=1", "key_mean_segment=256",
        "key_split=32:4,32:3", "scale_format=log8", "key_split_rank=objective", "value_mean=0", "sink_values=0",
        "sink_format=q8"},
       "query-aware key split: per kv head the 32 key channels the queries weigh most (by the split's "
       "expected score error, calibrated on the first call) at 4 bits, the other 32 at 3, each group "
       "rotated on its own with a one-byte log scale (key_bits is replaced by the split); 3-bit values "
       "in blocks of 64 with a one-byte scale: 30 + 25 bytes per head and row (3.44 bits per element); "
       "keys coded around the previous 256-row segment's f16 mean; the first position's key kept in "
       "8-bit codes (its value read from its codes; values not smoothed): within 3.5 bits per "
       "allocated row from 256 rows on"},
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
  validate_per_layer_config(config);
  return config;
}

std::string kv_preset_settings(const KvPreset& preset) {
  std::string out = preset.method;
  for (const std::string& set : preset.sets) out += " " + set;
  return out;
}

}  // namespace veloxquant
