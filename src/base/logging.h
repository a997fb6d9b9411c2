#pragma once
// Minimal levelled logging to stderr. The library logs sparingly (one line when a cache is
// wired, warnings on fallbacks); the level is process-wide and set by the CLI.
#include <string_view>

namespace base {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kSilent = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log(LogLevel level, std::string_view message);

inline void log_info(std::string_view message) { log(LogLevel::kInfo, message); }
inline void log_warning(std::string_view message) { log(LogLevel::kWarning, message); }

}  // namespace base
