#include "base/memory_limit.h"

#include <unistd.h>

#include <cstdio>

#include "base/error.h"

namespace base {

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size;
}

void require_allocatable(double bytes, const std::string& what) {
  const int64_t memory = physical_memory_bytes();
  if (memory <= 0 || bytes <= static_cast<double>(memory)) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char sizes[96];
  std::snprintf(sizes, sizeof sizes, " needs %.1f GiB, more than this machine's %.1f GiB of memory", bytes / kGiB,
                static_cast<double>(memory) / kGiB);
  throw InvalidArgument(what + sizes);
}

}  // namespace base
