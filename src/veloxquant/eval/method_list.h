#pragma once
// The method list of `veloxquant bench-host --methods`: several caches timed in one process.
//
//   --methods "none; turboquant_rvq --bits 2 --set rvq_value_bits=4; kivi --bits 4; h2o --set h2o_budget=512"
//
// Entries are separated by ';'. Each entry is a method name — or `--preset P` — followed by the
// same per-method flags a single-method command takes: --bits B, --set FIELD=VALUE
// (repeatable), --seed S.
// Whitespace is free. This file only splits and checks the syntax; whether the method exists
// and its values are valid is checked by the caller (kv_config_from_flags), which names the
// entry too.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace veloxquant::eval {

struct MethodEntry {
  std::string method;             // "none" = the host's native cache; "" with a preset
  std::string preset;             // "--preset q4" entries: a named configuration (presets/kv_presets.h)
  std::string bits;               // "" = the method's default
  std::optional<int64_t> seed;    // nullopt = the config default
  std::vector<std::string> sets;  // FIELD=VALUE, in the order given
  std::string label;              // the entry re-written with single spaces: names its row
};

// Throws base::InvalidArgument naming the entry (its 1-based index and text) for an empty
// list or entry, an unknown flag, a flag without its value, a --set without '=', a repeated
// --bits/--seed, a seed that is not an integer, or an entry that repeats an earlier one.
std::vector<MethodEntry> parse_method_list(const std::string& text);

// The entry text of `entry` as it would be typed ("kivi --bits 4 --set kivi_group_size=32").
std::string method_entry_label(const MethodEntry& entry);

}  // namespace veloxquant::eval
