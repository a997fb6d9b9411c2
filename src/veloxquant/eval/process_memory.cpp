#include "veloxquant/eval/process_memory.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

#include "base/proc_memory.h"

namespace veloxquant::eval {

namespace {

// A /proc/self/status field in bytes (base::process_status_bytes), nullopt where unavailable.
std::optional<int64_t> status_bytes(const std::string& key) {
  const std::size_t bytes = base::process_status_bytes(key);
  if (bytes == 0) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

}  // namespace

int64_t peak_rss_bytes() {
  if (auto bytes = status_bytes("VmHWM")) return *bytes;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

std::optional<int64_t> current_rss_bytes() {
  if (auto bytes = status_bytes("VmRSS")) return *bytes;
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
