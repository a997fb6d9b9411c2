#include "veloxquant/eval/host_bench_methods_report.h"

#include <algorithm>
#include <cstdio>

namespace veloxquant::eval {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

std::string optional_ratio(const std::optional<double>& ratio) { return ratio ? format("%.2f", *ratio) : "-"; }

nlohmann::json nullable(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json row_json(const MethodBenchRow& r) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& [prefill, decode] : r.rounds)
    rounds.push_back({{"prefill_seconds", prefill}, {"decode_seconds", decode}});
  nlohmann::json j = {{"method", r.label},
                      {"kind", r.row.kind},
                      {"ctx", r.row.ctx},
                      {"prefill_tokens", r.row.prefill_tokens},
                      {"prefill_seconds", r.row.prefill_seconds},
                      {"prefill_tokens_per_s", r.row.prefill_tokens_per_s},
                      {"prefill_ratio_to_none", nullable(r.prefill_ratio)},
                      {"decode_tokens", r.row.decode_tokens},
                      {"decode_seconds", r.row.decode_seconds},
                      {"decode_tokens_per_s", r.row.decode_tokens_per_s},
                      {"decode_ms_per_token", r.row.decode_ms_per_token},
                      {"decode_ratio_to_none", nullable(r.decode_ratio)},
                      {"kv_bytes", r.row.kv_bytes},
                      {"spread", r.spread},
                      {"rounds", rounds}};
  if (r.traffic) {
    j["decode_traffic"] = {{"weight_bytes_per_token", r.traffic->weight_bytes},
                           {"kv_bytes_per_token", r.traffic->kv_bytes},
                           {"seconds_per_token", r.traffic->seconds_per_token},
                           {"bytes_per_s", r.traffic->bytes_per_s},
                           {"probe_share", r.traffic->probe_share}};
  } else {
    j["decode_traffic"] = nullptr;
  }
  return j;
}

// One row of the markdown table (built here, not inside the caller's loop).
std::string table_row(const MethodBenchRow& row) {
  const bool decodes = row.row.decode_tokens > 0;
  const std::string ctx = decodes ? std::to_string(row.row.ctx) : "prefill " + std::to_string(row.row.ctx);
  std::string gbps = "-", share = "-";
  if (row.traffic && row.traffic->bytes_per_s > 0) {
    gbps = format("%.2f", row.traffic->bytes_per_s / 1e9);
    if (row.traffic->probe_share > 0) share = format("%.0f", 100.0 * row.traffic->probe_share);
  }
  return "| " + ctx + " | " + row.label + " | " + (decodes ? format("%.1f", row.row.decode_tokens_per_s) : "-") +
         " | " + (decodes ? optional_ratio(row.decode_ratio) : "-") + " | " +
         format("%.1f", row.row.prefill_tokens_per_s) + " | " + optional_ratio(row.prefill_ratio) + " | " +
         format("%.2f", static_cast<double>(row.row.kv_bytes) / kMiB) + " | " + gbps + " | " + share + " | " +
         format("%.2f", row.spread) + " |\n";
}

int64_t largest_decode_ctx(const std::vector<MethodBenchRow>& rows) {
  int64_t ctx = 0;
  for (const auto& r : rows) {
    if (r.row.decode_tokens > 0) ctx = std::max(ctx, r.row.ctx);
  }
  return ctx;
}

}  // namespace

nlohmann::json host_bench_methods_json(const HostBenchMethodsReport& report) {
  const HostBenchReport& r = report.run;
  nlohmann::json methods = nlohmann::json::array();
  for (const auto& m : report.methods) {
    methods.push_back({{"label", m.label},
                       {"method", m.method},
                       {"bits", m.bits},
                       {"settings", m.sets},
                       {"seed", m.seed ? nlohmann::json(*m.seed) : nlohmann::json(nullptr)}});
  }
  nlohmann::json probe = nullptr;
  if (report.probe) {
    probe = {{"bytes", report.probe->bytes},
             {"threads", report.probe->threads},
             {"best_bytes_per_s", report.probe->best_bytes_per_s},
             {"pass_bytes_per_s", report.probe->pass_bytes_per_s}};
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : report.rows) rows.push_back(row_json(row));
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
          {"kv_dtype", r.kv_dtype},
          {"prompt", r.prompt},
          {"decode_tokens", r.decode_tokens},
          {"batch", r.batch},
          {"repeat", r.repeat},
          {"decode_statistic", r.decode_statistic},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"methods", methods},
          {"bandwidth_probe", probe},
          {"weight_bytes_per_decode_token", report.weight_bytes_per_token},
          {"kv_bytes_read_per_decode_token", "the caches' nbytes() at the row's context (resident bytes)"},
          {"rows", rows}};
}

std::string host_bench_methods_table(const HostBenchMethodsReport& report) {
  const HostBenchReport& r = report.run;
  std::string out;
  out += "model    " + r.model + " (" + r.architecture + ", context " + std::to_string(r.context_length) + ")\n";
  out += "host     " + r.cpu + "; " + std::to_string(r.threads) + " threads; " + r.simd_target + "; " + r.build_type +
         " build\n";
  out += "runs     " + std::to_string(report.methods.size()) + " caches (native kv " + r.kv_dtype + "); prompt " +
         r.prompt + "; batch " + std::to_string(r.batch) + "; " + std::to_string(r.decode_tokens) +
         " decode steps per ctx; best of " + std::to_string(r.repeat) + " alternating rounds" +
         decode_statistic_note(r) + "\n";
  if (report.probe) {
    out += "probe    streaming read " + format("%.2f", report.probe->best_bytes_per_s / 1e9) + " GB/s (best of " +
           std::to_string(report.probe->pass_bytes_per_s.size()) + " passes over " +
           format("%.0f", static_cast<double>(report.probe->bytes) / kMiB) + " MiB, " +
           std::to_string(report.probe->threads) + " threads)\n";
  }
  out +=
      "\n| ctx | method | decode tok/s | x none | prefill tok/s | x none | KV MiB | read GB/s | % of probe | spread "
      "|\n";
  out += "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& row : report.rows) out += table_row(row);

  const int64_t largest = largest_decode_ctx(report.rows);
  if (largest > 0) {
    std::size_t native = 0;
    for (const auto& row : report.rows) {
      if (row.label == "none" && row.row.decode_tokens > 0 && row.row.ctx == largest) native = row.row.kv_bytes;
    }
    out += "\nKV resident at ctx " + std::to_string(largest) + " (the caches' nbytes()):\n\n";
    out += "| method | KV MiB | x smaller than none |\n|---|---:|---:|\n";
    for (const auto& row : report.rows) {
      if (row.row.decode_tokens == 0 || row.row.ctx != largest) continue;
      const std::string smaller =
          native > 0 && row.row.kv_bytes > 0
              ? format("%.2f", static_cast<double>(native) / static_cast<double>(row.row.kv_bytes))
              : "-";
      out += "| " + row.label + " | " + format("%.2f", static_cast<double>(row.row.kv_bytes) / kMiB) + " | " + smaller +
             " |\n";
    }
  }

  out +=
      "\nx none: tokens/s over the native cache's in the same rounds. prefill tok/s of a ctx row: its "
      "ctx - " +
      std::to_string(r.decode_tokens) + " prompt tokens.\n";
  out += "read GB/s: bytes read per decode token / time per token, where bytes read = the weights, " +
         format("%.2f", static_cast<double>(report.weight_bytes_per_token) / kMiB) +
         " MiB (the model file's tensor sizes: each matrix once, one embedding row unless it is the classifier)"
         " + the row's KV MiB (the caches' nbytes() at that ctx); % of probe: that rate over the probe's.\n";
  out += "spread: slowest / fastest time of the row's phase over the rounds (1.00 = no noise).\n";
  out += "\npeak RSS " + format("%.1f", static_cast<double>(r.peak_rss_bytes) / kMiB) + " MiB\n";
  return out;
}

}  // namespace veloxquant::eval
