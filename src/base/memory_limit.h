#pragma once
// Allocations a setting controls (an eviction budget, a full-precision tail) are checked against
// the machine's memory before they are made, so that `h2o_budget=2147483647` fails at once with a
// message naming the setting and the bytes, not with std::bad_alloc (or a long swap) later.
#include <cstdint>
#include <string>

namespace base {

// Physical memory of this machine in bytes (sysconf); 0 when it cannot be read.
int64_t physical_memory_bytes();

// Throws base::InvalidArgument "<what> needs X GiB, more than this machine's Y GiB of memory"
// when bytes exceed the physical memory. `bytes` is a double so that callers can pass a product
// of settings without overflowing first.
void require_allocatable(double bytes, const std::string& what);

}  // namespace base
