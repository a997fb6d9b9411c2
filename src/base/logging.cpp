#include "base/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace base {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_mutex;
const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    default:
      return "";
  }
}
}  // namespace

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void log(LogLevel level, std::string_view message) {
  if (level < g_level.load() || level == LogLevel::kSilent) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[veloxquant %s] %.*s\n", level_tag(level), static_cast<int>(message.size()), message.data());
}

}  // namespace base
