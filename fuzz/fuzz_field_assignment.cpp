// `--set FIELD=VALUE` on arbitrary text (one assignment per line), then validation: a config or a
// typed error (QuantizerConfigError and friends), never a crash or a silently narrowed value.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/field_assignment.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  veloxquant::KVCacheConfig config;
  try {
    // One assignment per line, so the fuzzer can combine a method with its fields.
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t end = std::min(text.find('\n', start), text.size());
      if (end > start) (void)veloxquant::apply_field_assignment(config, text.substr(start, end - start));
      start = end + 1;
    }
    veloxquant::validate_for_create(config);
  } catch (const std::exception&) {
  }
  return 0;
}
