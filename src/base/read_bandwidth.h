#pragma once
// How fast this machine streams memory into the cores: the ceiling a memory-bound decode step
// can approach. A decode step reads every weight matrix and the whole KV cache once per token,
// so (bytes it reads) / (time per token) set beside this number says how close to "memory
// speed" it runs. The buffer must be far larger than the last-level cache, or the probe
// measures the cache instead of DRAM.
#include <cstddef>
#include <vector>

#include "base/thread_pool.h"

namespace base {

struct ReadBandwidth {
  std::size_t bytes = 0;                 // bytes read per pass
  int threads = 0;                       // participants of the pool that read them
  double best_bytes_per_s = 0.0;         // the fastest pass
  std::vector<double> pass_bytes_per_s;  // every pass, in order (the spread shows the noise)
};

// Reads a buffer of `bytes` (rounded down to whole 64-byte lines) `passes` times with every
// participant of `pool`, each summing its own contiguous slice, and returns the best pass.
// The buffer is allocated and written once before the first pass (page faults stay outside
// the clock) and freed on return. Throws base::InvalidArgument naming the value when bytes
// is under 4096 or passes < 1.
ReadBandwidth measure_read_bandwidth(ThreadPool& pool, std::size_t bytes, int passes);

}  // namespace base
