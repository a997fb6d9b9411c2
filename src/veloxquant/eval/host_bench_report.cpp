#include "veloxquant/eval/host_bench_report.h"

#include <cstdio>

namespace veloxquant::eval {

namespace {

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

nlohmann::json row_json(const HostBenchRow& row) {
  return {{"kind", row.kind},
          {"ctx", row.ctx},
          {"prefill_tokens", row.prefill_tokens},
          {"prefill_seconds", row.prefill_seconds},
          {"prefill_tokens_per_s", row.prefill_tokens_per_s},
          {"decode_tokens", row.decode_tokens},
          {"decode_seconds", row.decode_seconds},
          {"decode_tokens_per_s", row.decode_tokens_per_s},
          {"decode_ms_per_token", row.decode_ms_per_token},
          {"kv_bytes", row.kv_bytes}};
}

}  // namespace

nlohmann::json host_bench_json(const HostBenchReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) rows.push_back(row_json(row));
  return {{"command", r.command},
          {"version", r.version},
          {"model", r.model},
          {"model_name", r.model_name},
          {"architecture", r.architecture},
          {"context_length", r.context_length},
          {"threads", r.threads},
          {"build_type", r.build_type},
          {"cpu", r.cpu},
          {"simd_target", r.simd_target},
          {"method", r.method},
          {"bits", r.bits},
          {"settings", r.settings},
          {"kv_dtype", r.kv_dtype},
          {"prompt", r.prompt},
          {"decode_tokens", r.decode_tokens},
          {"batch", r.batch},
          {"repeat", r.repeat},
          {"decode_statistic", r.decode_statistic},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"rows", rows}};
}

std::string decode_statistic_note(const HostBenchReport& report) {
  return report.decode_statistic == "median" ? "; decode = median step x steps" : "";
}

std::string host_bench_table(const HostBenchReport& r) {
  std::string out;
  out += "model    " + r.model + " (" + r.architecture + ", context " + std::to_string(r.context_length) + ")\n";
  out += "host     " + r.cpu + "; " + std::to_string(r.threads) + " threads; " + r.simd_target + "; " + r.build_type +
         " build\n";
  out += "cache    " + r.method + (r.bits.empty() ? "" : " bits=" + r.bits) +
         (r.settings.empty() ? "" : " " + r.settings) + " (kv " + r.kv_dtype + "); prompt " + r.prompt + "; batch " +
         std::to_string(r.batch) + "; best of " + std::to_string(r.repeat) + decode_statistic_note(r) + "\n\n";
  out += "| row | ctx | prefill tokens | prefill tok/s | decode tokens | decode tok/s | ms/token | KV MiB |\n";
  out += "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& row : r.rows) {
    const bool decodes = row.decode_tokens > 0;
    out += "| " + row.kind + " | " + std::to_string(row.ctx) + " | " + std::to_string(row.prefill_tokens) + " | " +
           format("%.1f", row.prefill_tokens_per_s) + " | " + (decodes ? std::to_string(row.decode_tokens) : "-") +
           " | " + (decodes ? format("%.1f", row.decode_tokens_per_s) : "-") + " | " +
           (decodes ? format("%.2f", row.decode_ms_per_token) : "-") + " | " +
           format("%.2f", static_cast<double>(row.kv_bytes) / (1024.0 * 1024.0)) + " |\n";
  }
  out += "\npeak RSS " + format("%.1f", static_cast<double>(r.peak_rss_bytes) / (1024.0 * 1024.0)) + " MiB\n";
  return out;
}

}  // namespace veloxquant::eval
