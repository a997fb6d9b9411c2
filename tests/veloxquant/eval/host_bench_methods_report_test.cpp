// bench-host --methods' table and JSON on a hand-made report: one table line per method per
// row with its ratios, traffic and spread, the KV summary at the largest context against the
// native cache, and a JSON record with exactly its keys and nulls where a number is absent.
#include "veloxquant/eval/host_bench_methods_report.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace veloxquant::eval {
namespace {

MethodBenchRow row(const std::string& label, const std::string& kind, int64_t ctx, double prefill_tps,
                   double decode_tps, std::size_t kv_bytes) {
  MethodBenchRow r;
  r.label = label;
  r.row.kind = kind;
  r.row.ctx = ctx;
  r.row.prefill_tokens = kind == "decode" ? ctx - 32 : ctx;
  r.row.prefill_tokens_per_s = prefill_tps;
  r.row.decode_tokens = kind == "decode" ? 32 : 0;
  r.row.decode_tokens_per_s = decode_tps;
  r.row.decode_seconds = decode_tps > 0 ? 32 / decode_tps : 0;
  r.row.kv_bytes = kv_bytes;
  r.rounds = {{1.0, r.row.decode_seconds}};
  r.spread = 1.25;
  return r;
}

HostBenchMethodsReport report() {
  HostBenchMethodsReport r;
  r.run.command = "veloxquant bench-host --methods \"none;kivi --bits 4\"";
  r.run.model = "m.gguf";
  r.run.architecture = "llama";
  r.run.threads = 2;
  r.run.decode_tokens = 32;
  r.run.repeat = 3;
  MethodEntry none;
  none.method = none.label = "none";
  MethodEntry kivi;
  kivi.method = "kivi";
  kivi.bits = "4";
  kivi.label = "kivi --bits 4";
  r.methods = {none, kivi};
  r.probe = base::ReadBandwidth{512u << 20, 2, 10e9, {9e9, 10e9}};
  r.weight_bytes_per_token = 8u << 20;  // 8 MiB
  constexpr std::size_t MiB = 1u << 20;
  r.rows = {row("none", "prefill", 512, 400, 0, 2 * MiB),   row("kivi --bits 4", "prefill", 512, 300, 0, MiB),
            row("none", "decode", 1024, 200, 100, 8 * MiB), row("kivi --bits 4", "decode", 1024, 150, 80, 2 * MiB),
            row("none", "decode", 4096, 100, 50, 32 * MiB), row("kivi --bits 4", "decode", 4096, 80, 60, 8 * MiB)};
  fill_ratios(r.rows);
  fill_traffic(r.rows, r.weight_bytes_per_token, r.probe->best_bytes_per_s);
  return r;
}

std::vector<std::string> table_lines_starting(const std::string& table, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

TEST(HostBenchMethodsReport, TableHasARowPerMethodPerContext) {
  const std::string table = host_bench_methods_table(report());
  EXPECT_EQ(table_lines_starting(table, "| 1024 | ").size(), 2u) << table;
  EXPECT_EQ(table_lines_starting(table, "| 4096 | ").size(), 2u) << table;
  EXPECT_EQ(table_lines_starting(table, "| prefill 512 | ").size(), 2u) << table;
  // ctx 4096, kivi: 60 tok/s = 1.20x none's 50; prefill 80 = 0.80x; 8 MiB KV. Traffic: (8 + 8)
  // MiB = 16777216 bytes per token x 60 tokens/s = 1.01 GB/s, 10% of the 10 GB/s probe.
  EXPECT_NE(table.find("| 4096 | kivi --bits 4 | 60.0 | 1.20 | 80.0 | 0.80 | 8.00 | 1.01 | 10 | 1.25 |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 4096 | none | 50.0 | 1.00 | 100.0 | 1.00 | 32.00 | 2.10 | 21 | 1.25 |"), std::string::npos)
      << table;
  EXPECT_NE(table.find("| prefill 512 | kivi --bits 4 | - | - | 300.0 | 0.75 | 1.00 | - | - | 1.25 |"),
            std::string::npos)
      << table;
  // The KV summary at the largest context: 32 MiB native, 8 MiB kivi = 4x smaller.
  EXPECT_NE(table.find("KV resident at ctx 4096"), std::string::npos) << table;
  EXPECT_NE(table.find("| kivi --bits 4 | 8.00 | 4.00 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| none | 32.00 | 1.00 |"), std::string::npos) << table;
  EXPECT_NE(table.find("streaming read 10.00 GB/s (best of 2 passes over 512 MiB, 2 threads)"), std::string::npos)
      << table;
  EXPECT_NE(table.find("nbytes()"), std::string::npos) << table;  // says what KV bytes read are
}

TEST(HostBenchMethodsReport, JsonHasItsKeysAndNullsWhereAbsent) {
  HostBenchMethodsReport r = report();
  r.rows.push_back(row("kivi --bits 4", "decode", 8192, 40, 30, 16u << 20));  // no native row at 8192
  fill_ratios(r.rows);
  const nlohmann::json j = host_bench_methods_json(r);
  std::set<std::string> keys;
  for (const auto& item : j.items()) keys.insert(item.key());
  const std::set<std::string> expected = {"command",
                                          "version",
                                          "model",
                                          "model_name",
                                          "architecture",
                                          "context_length",
                                          "threads",
                                          "build_type",
                                          "cpu",
                                          "simd_target",
                                          "kv_dtype",
                                          "prompt",
                                          "decode_tokens",
                                          "batch",
                                          "repeat",
                                          "decode_statistic",
                                          "peak_rss_bytes",
                                          "methods",
                                          "bandwidth_probe",
                                          "weight_bytes_per_decode_token",
                                          "kv_bytes_read_per_decode_token",
                                          "rows"};
  EXPECT_EQ(keys, expected);
  ASSERT_EQ(j["methods"].size(), 2u);
  EXPECT_EQ(j["methods"][1]["label"], "kivi --bits 4");
  EXPECT_EQ(j["methods"][1]["bits"], "4");
  EXPECT_TRUE(j["methods"][1]["seed"].is_null());
  EXPECT_EQ(j["bandwidth_probe"]["best_bytes_per_s"], 10e9);
  EXPECT_EQ(j["weight_bytes_per_decode_token"], 8u << 20);
  ASSERT_EQ(j["rows"].size(), 7u);
  EXPECT_TRUE(j["rows"][0]["decode_traffic"].is_null());
  EXPECT_TRUE(j["rows"][0]["decode_ratio_to_none"].is_null());
  EXPECT_DOUBLE_EQ(j["rows"][3]["decode_ratio_to_none"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(j["rows"][3]["decode_traffic"]["probe_share"].get<double>(), (8.0 + 2.0) * (1 << 20) * 80 / 10e9);
  EXPECT_TRUE(j["rows"][6]["decode_ratio_to_none"].is_null());
  EXPECT_EQ(j["rows"][6]["rounds"].size(), 1u);

  r.probe.reset();  // --probe-mib 0
  EXPECT_TRUE(host_bench_methods_json(r)["bandwidth_probe"].is_null());
}

}  // namespace
}  // namespace veloxquant::eval
