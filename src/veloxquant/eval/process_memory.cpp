#include "veloxquant/eval/process_memory.h"

#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <string>

namespace veloxquant::eval {

namespace {

// Reads a "Key:   1234 kB" line of /proc/self/status.
std::optional<int64_t> status_kib(const std::string& key) {
  std::ifstream status("/proc/self/status");
  if (!status) return std::nullopt;
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t kib = 0;
    if (fields >> kib) return kib;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

int64_t peak_rss_bytes() {
  if (auto kib = status_kib("VmHWM")) return *kib * 1024;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

std::optional<int64_t> current_rss_bytes() {
  if (auto kib = status_kib("VmRSS")) return *kib * 1024;
  return std::nullopt;
}

bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  if (!clear_refs) return false;
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace veloxquant::eval
