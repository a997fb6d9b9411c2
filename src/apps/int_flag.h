#pragma once
// Integer flags given as text (so that "", "abc" and out-of-range values get a message naming
// the flag instead of CLI11's generic one).
#include <cstdint>
#include <string>

namespace apps {

// `text` as an integer in [min, max]; throws base::InvalidArgument naming `flag` otherwise.
int64_t parse_int_flag(const std::string& flag, const std::string& text, int64_t min, int64_t max);

}  // namespace apps
