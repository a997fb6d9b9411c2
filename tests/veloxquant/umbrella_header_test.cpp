// veloxquant.h stays complete: every cache header of the library (*_cache.h anywhere under
// src/veloxquant/) is included by the umbrella header, so a method added in its own folder cannot
// be forgotten there (issue 13: the header had drifted without xquant and minicache).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

namespace fs = std::filesystem;

TEST(UmbrellaHeader, IncludesEveryCacheHeader) {
  const fs::path src = fs::path(VQ_SOURCE_DIR) / "src";
  std::ifstream in(src / "veloxquant" / "veloxquant.h");
  ASSERT_TRUE(in) << "cannot read src/veloxquant/veloxquant.h";
  std::stringstream text;
  text << in.rdbuf();
  const std::string umbrella = text.str();
  int headers = 0;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(src / "veloxquant")) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.size() < 8 || name.substr(name.size() - 8) != "_cache.h") continue;
    ++headers;
    const std::string include = "#include \"" + fs::relative(entry.path(), src).generic_string() + "\"";
    EXPECT_NE(umbrella.find(include), std::string::npos) << "veloxquant.h lacks " << include;
  }
  EXPECT_GE(headers, 10);  // the walk found the cache headers at all
}

}  // namespace
}  // namespace veloxquant
