#pragma once
// What `veloxquant bench-host --methods` prints: one table (a row per method per context, each
// beside the native cache of the same run) or one JSON record with every round's seconds.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/read_bandwidth.h"
#include "veloxquant/eval/host_bench_methods.h"
#include "veloxquant/eval/host_bench_report.h"
#include "veloxquant/eval/method_list.h"

namespace veloxquant::eval {

struct HostBenchMethodsReport {
  // The run's facts (command, model, machine, threads, build, kv dtype, prompt, counts, peak
  // RSS) as a single-method report holds them; its method, bits, settings and rows are unused.
  HostBenchReport run;
  std::vector<MethodEntry> methods;
  std::optional<base::ReadBandwidth> probe;  // nullopt: --probe-mib 0
  std::size_t weight_bytes_per_token = 0;    // decode_weight_bytes_of_file
  std::vector<MethodBenchRow> rows;          // ratios and traffic filled
};

nlohmann::json host_bench_methods_json(const HostBenchMethodsReport& report);

// Header lines, the method x ctx table, the KV bytes each method holds at the largest
// context, and what the bandwidth columns are made of.
std::string host_bench_methods_table(const HostBenchMethodsReport& report);

}  // namespace veloxquant::eval
