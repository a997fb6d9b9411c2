#pragma once
// KV-cache presets (DESIGN.md "Presets (q8, q5, q4, q3) name the best measured configuration at
// each of those sizes"): one name per llama.cpp KV cache size, resolving to a documented
// configuration of a veloxquant method whose resident bytes never exceed that size. This table
// is the one declaration every command reads (generate, eval, bench-host, bench-methods through
// --preset; `veloxquant methods` lists it). The measurements behind each choice are in
// docs/frontier.md.
#include <string>
#include <string_view>
#include <vector>

#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

struct KvPreset {
  std::string name;               // "q4"
  std::string size_of;            // what its size matches: "llama.cpp q4_0 K+V"
  double bits_per_element;        // the size budget, bits per cached key/value element (4.5)
  std::string method;             // registry method it resolves to
  std::vector<std::string> sets;  // FIELD=VALUE assignments on top of the defaults
  std::string why;                // one line: what was measured
};

const std::vector<KvPreset>& kv_presets();

// The preset called `name`; throws QuantizerConfigError naming it and the known presets.
const KvPreset& require_kv_preset(std::string_view name);

// The config the preset resolves to (method, options, seed), validated.
KVCacheConfig kv_preset_config(const KvPreset& preset, int64_t seed = 42);

// "turboquant_block key_bits=4 value_bits=4" — what the preset resolves to, for listings/reports.
std::string kv_preset_settings(const KvPreset& preset);

}  // namespace veloxquant
