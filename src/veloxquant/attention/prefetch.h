#pragma once
// Software prefetch of a byte range, for row sources that stream a long cache once per decode
// step. The hardware prefetchers restart at every 4 KiB page, so without hints a kernel reading
// code rows page after page waits on DRAM between bursts of compute; a hint for the next tile's
// lines keeps them in flight. A prefetch never faults and changes no result.
#include <cstdint>

namespace veloxquant::attention {

// One hint per 64-byte line of [p, p + bytes).
inline void prefetch_bytes(const void* p, int64_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o);
}

}  // namespace veloxquant::attention
