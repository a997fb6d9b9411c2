#include "veloxquant/eval/results_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/error.h"

namespace veloxquant::eval {

namespace {

std::string fixed(double value, int decimals) {
  if (!std::isfinite(value)) return "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string signed_fixed(double value, int decimals) {
  if (!std::isfinite(value)) return "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.*f", decimals, value);
  return buf;
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

}  // namespace

std::string format_metric(double value) {
  if (!std::isfinite(value)) return "inf";
  if (value == 0.0) return "0";
  char buf[64];
  if (std::fabs(value) < 1e-3 || std::fabs(value) >= 1e5) {
    std::snprintf(buf, sizeof buf, "%.2e", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", value);
  }
  return buf;
}

std::vector<EvalRecord> sorted_by_bytes(std::vector<EvalRecord> records) {
  std::stable_sort(records.begin(), records.end(), [](const EvalRecord& a, const EvalRecord& b) {
    if (a.kv_bytes_per_token != b.kv_bytes_per_token) return a.kv_bytes_per_token < b.kv_bytes_per_token;
    if (a.kld != b.kld) return a.kld < b.kld;
    return a.method < b.method;
  });
  return records;
}

std::string markdown_results_table(std::vector<EvalRecord> records) {
  if (records.empty()) throw base::InvalidArgument("results table: no result to tabulate");
  records = sorted_by_bytes(std::move(records));
  const EvalRecord& first = records.front();
  std::ostringstream out;
  out << "| method | bits | settings | KV bytes/token | x smaller | KL mean | KL max | top-1 % | PPL | dPPL | "
         "tok/s | tok/s baseline |\n";
  out << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  // The native cache is the reference every other row is measured against (same windows).
  out << "| native cache (baseline) | - | - | " << fixed(first.kv_bytes_per_token_baseline, 1) << " | 1.00 | 0 | 0 | "
      << "100.00 | " << fixed(first.ppl_baseline, 4) << " | 0 | " << fixed(first.tok_per_s_baseline, 1) << " | "
      << fixed(first.tok_per_s_baseline, 1) << " |\n";
  for (const auto& r : records) {
    const double ratio = r.kv_bytes_per_token > 0.0 ? r.kv_bytes_per_token_baseline / r.kv_bytes_per_token : 0.0;
    out << "| " << r.method << " | " << or_dash(r.bits) << " | " << or_dash(r.settings) << " | "
        << fixed(r.kv_bytes_per_token, 1) << " | " << fixed(ratio, 2) << " | " << format_metric(r.kld) << " | "
        << format_metric(r.kld_max) << " | " << fixed(r.top1_agreement, 2) << " | " << fixed(r.ppl, 4) << " | "
        << signed_fixed(r.ppl - r.ppl_baseline, 4) << " | " << fixed(r.tok_per_s, 1) << " | "
        << fixed(r.tok_per_s_baseline, 1) << " |\n";
  }
  return out.str();
}

}  // namespace veloxquant::eval
