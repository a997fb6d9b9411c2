#pragma once
// `--set FIELD=VALUE` (spec §8 `serve`/`generate`): parse against the declared field type and
// store into the config. Unknown field -> QuantizerConfigError; `method` is refused (it has
// its own flag); a field irrelevant to the config's method is stored but reported back as a
// warning (issue #345 of the original), never an error.
#include <optional>
#include <string>
#include <string_view>

#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

// Returns the warning text for an irrelevant field, else nullopt.
std::optional<std::string> apply_field_assignment(KVCacheConfig& config, std::string_view assignment);

}  // namespace veloxquant
