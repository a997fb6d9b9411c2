#include "apps/int_flag.h"

#include <charconv>
#include <system_error>

#include "base/error.h"

namespace apps {

int64_t parse_int_flag(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    throw base::InvalidArgument(flag + " expects an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    throw base::InvalidArgument(flag + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                                text);
  }
  return value;
}

}  // namespace apps
