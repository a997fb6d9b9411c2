// Allocations sized by settings are refused up front when no machine of this size could hold
// them (base/memory_limit.h).
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "base/memory_limit.h"

namespace {

TEST(MemoryLimit, ReadsThisMachinesMemory) {
  const int64_t bytes = base::physical_memory_bytes();
  EXPECT_GT(bytes, int64_t{256} << 20);  // any machine that runs the tests has more than 256 MiB
  EXPECT_LT(bytes, int64_t{1} << 50);
}

TEST(MemoryLimit, RefusesWhatCannotFitNamingIt) {
  EXPECT_NO_THROW(base::require_allocatable(1024.0, "a small buffer"));
  EXPECT_NO_THROW(base::require_allocatable(static_cast<double>(base::physical_memory_bytes()), "exactly all of it"));
  try {
    base::require_allocatable(1e18, "a budget of 1e18 bytes");
    FAIL() << "an exabyte was allowed";
  } catch (const base::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a budget of 1e18 bytes needs 931322574.6 GiB, more than this machine's"), std::string::npos)
        << what;
  }
}

}  // namespace
