#pragma once
// What the chat-template tests share (chat_template_test.cpp, jinja_test.cpp): where
// tools/reference/make_chat_template_fixtures.py writes its fixtures, a whole-file reader, and
// the fixed clock the fixtures were rendered with (strftime_now).
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

namespace chat_template_fixtures {

inline const std::string kFixtures = std::string(VQ_SOURCE_DIR) + "/tests/fixtures/tokenizer/";

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fixtures' clock: 2026-01-15 12:00 local time.
inline std::time_t fixed_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

}  // namespace chat_template_fixtures
