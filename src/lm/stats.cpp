#include "lm/stats.h"

#include <cstdio>

#include "base/proc_memory.h"

namespace lm {

std::size_t parse_status_kib_field(const std::string& status_text, const std::string& field) {
  return base::proc_kib_field_bytes(status_text, field);
}

std::size_t peak_rss_bytes() { return base::process_status_bytes("VmHWM"); }

std::size_t current_rss_bytes() { return base::process_status_bytes("VmRSS"); }

std::size_t kv_bytes_resident(const CacheList& caches) {
  std::size_t total = 0;
  for (const auto& cache : caches) {
    if (cache) total += cache->nbytes();
  }
  return total;
}

std::string format_bytes(std::size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

}  // namespace lm
