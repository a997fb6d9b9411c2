#pragma once
// What bench-methods leaves in its --out directory: results.json (every record plus the
// settings and the command that made them), results.md (the table, sorted by KV bytes per
// token, with the command next to the numbers) and results.svg (KL vs bytes/token).
#include <cstdint>
#include <string>
#include <vector>

#include "veloxquant/eval/eval_record.h"
#include "veloxquant/eval/quality_plot_svg.h"

namespace veloxquant::eval {

struct SkippedSetting {
  std::string method;
  std::string bits;
  std::string reason;  // the error the method's config or factory raised
};

struct BenchReport {
  std::string command;  // the exact command line that produced the numbers
  std::string model;
  std::string text;
  std::string host;  // "2 cores, x86_64" — context for the tokens/s columns
  std::vector<EvalRecord> records;
  std::vector<SkippedSetting> skipped;
  std::vector<PlotReferenceLine> references;
  int64_t peak_rss_bytes = 0;  // the whole run (every method shares one process)
};

nlohmann::json bench_report_json(const BenchReport& report);
std::string bench_report_markdown(const BenchReport& report, const std::string& plot_file);

// Writes results.json, results.md and results.svg into `dir` (created when missing). Throws
// base::InvalidArgument when there is no record, base::FormatError when a file cannot be written.
void write_bench_report(const BenchReport& report, const std::string& dir);

}  // namespace veloxquant::eval
