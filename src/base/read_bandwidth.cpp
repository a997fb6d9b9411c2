#include "base/read_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "base/aligned_buffer.h"
#include "base/error.h"

namespace base {

namespace {

constexpr std::size_t kLine = 64;
constexpr std::size_t kWordsPerLine = kLine / sizeof(uint64_t);

// Sums whole cache lines. Eight independent accumulators keep the adds off the critical path
// (one add chain would cap the loop at one word per cycle, below DRAM speed on one core), and
// the compiler may vectorise the loop; either way the loads, not the arithmetic, bound it.
uint64_t sum_lines(const uint64_t* words, std::size_t lines) {
  uint64_t acc[kWordsPerLine] = {};
  for (std::size_t line = 0; line < lines; ++line) {
    const uint64_t* w = words + line * kWordsPerLine;
    for (std::size_t i = 0; i < kWordsPerLine; ++i) acc[i] += w[i];
  }
  uint64_t total = 0;
  for (uint64_t a : acc) total += a;
  return total;
}

}  // namespace

ReadBandwidth measure_read_bandwidth(ThreadPool& pool, std::size_t bytes, int passes) {
  if (bytes < 4096) {
    throw InvalidArgument("bandwidth probe: buffer must be >= 4096 bytes, got " + std::to_string(bytes));
  }
  if (passes < 1) throw InvalidArgument("bandwidth probe: passes must be >= 1, got " + std::to_string(passes));
  const std::size_t lines = bytes / kLine;
  AlignedBuffer buffer(lines * kLine);
  auto* words = buffer.as<uint64_t>();
  // Non-zero content written once: every page is really resident before the clock starts.
  for (std::size_t i = 0; i < lines * kWordsPerLine; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;

  // One contiguous slice of whole lines per participant, as the pool hands out its chunks:
  // each thread streams its own region, the access pattern of a row-split matmul.
  const auto slices = static_cast<int64_t>(std::min<std::size_t>(lines, static_cast<std::size_t>(pool.size())));
  const std::size_t lines_per_slice = (lines + static_cast<std::size_t>(slices) - 1) / static_cast<std::size_t>(slices);
  std::atomic<uint64_t> sink{0};
  ReadBandwidth result;
  result.bytes = lines * kLine;
  result.threads = pool.size();
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(slices, [&](int64_t begin, int64_t end) {
      const std::size_t first = static_cast<std::size_t>(begin) * lines_per_slice;
      const std::size_t last = std::min(lines, static_cast<std::size_t>(end) * lines_per_slice);
      // An atomic side effect of every slice's sum: the reads cannot be optimised away.
      if (first < last)
        sink.fetch_add(sum_lines(words + first * kWordsPerLine, last - first), std::memory_order_relaxed);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = seconds > 0 ? static_cast<double>(result.bytes) / seconds : 0.0;
    result.pass_bytes_per_s.push_back(rate);
    result.best_bytes_per_s = std::max(result.best_bytes_per_s, rate);
  }
  return result;
}

}  // namespace base
