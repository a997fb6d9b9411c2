#include "lm/stats.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace lm {

namespace {

std::string read_proc_status() {
  std::ifstream in("/proc/self/status");
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::size_t parse_status_kib_field(const std::string& status_text, const std::string& field) {
  // Lines look like "VmHWM:\t   12345 kB"; the field name must start a line.
  const std::string key = field + ":";
  std::size_t pos = 0;
  while ((pos = status_text.find(key, pos)) != std::string::npos) {
    if (pos == 0 || status_text[pos - 1] == '\n') break;
    pos += key.size();
  }
  if (pos == std::string::npos) return 0;
  std::size_t i = pos + key.size();
  while (i < status_text.size() && (status_text[i] == ' ' || status_text[i] == '\t')) ++i;
  std::size_t kib = 0;
  bool any = false;
  while (i < status_text.size() && std::isdigit(static_cast<unsigned char>(status_text[i]))) {
    kib = kib * 10 + static_cast<std::size_t>(status_text[i] - '0');
    any = true;
    ++i;
  }
  if (!any) return 0;
  while (i < status_text.size() && status_text[i] == ' ') ++i;
  if (status_text.compare(i, 2, "kB") != 0) return 0;
  return kib * 1024;
}

std::size_t peak_rss_bytes() { return parse_status_kib_field(read_proc_status(), "VmHWM"); }

std::size_t current_rss_bytes() { return parse_status_kib_field(read_proc_status(), "VmRSS"); }

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
