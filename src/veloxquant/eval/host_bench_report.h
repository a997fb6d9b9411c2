#pragma once
// What `veloxquant bench-host` prints: a table for people, or one JSON record for scripts
// (tools/bench_llama_cpp.py reads it). The record carries everything that makes the
// tokens/s comparable: the machine, the threads, the build type, the SIMD target, the cache.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "veloxquant/eval/host_bench.h"

namespace veloxquant::eval {

struct HostBenchReport {
  std::string command;  // the exact command line that produced the numbers
  std::string version;  // veloxquant's
  std::string model;    // the path given
  std::string model_name;
  std::string architecture;
  int64_t context_length = 0;
  int threads = 0;          // resolved (0 = all cores is written as the core count)
  std::string build_type;   // CMAKE_BUILD_TYPE of the binary
  std::string cpu;          // cpu_description()
  std::string simd_target;  // the Highway target dispatched at run time
  std::string method;       // "none" = the host's native cache
  std::string bits;
  std::string settings;  // --set assignments, comma-joined
  std::string kv_dtype;
  std::string prompt;  // where the prompt tokens came from: a text path or "pattern"
  int64_t decode_tokens = 0;
  int64_t batch = 0;
  int repeat = 0;
  std::string decode_statistic = "total";  // decode_statistic_name() of the run's --decode-stat
  int64_t peak_rss_bytes = 0;              // VmHWM of the whole run, model weights included
  std::vector<HostBenchRow> rows;
};

nlohmann::json host_bench_json(const HostBenchReport& report);

// "" for the total-time statistic; otherwise the header's words saying how decode was timed.
std::string decode_statistic_note(const HostBenchReport& report);

// A Markdown table (one row per HostBenchRow) under a few header lines.
std::string host_bench_table(const HostBenchReport& report);

}  // namespace veloxquant::eval
