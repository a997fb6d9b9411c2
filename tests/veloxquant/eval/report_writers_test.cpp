// The writers behind `eval --json` and bench-methods: JSON keys of issue #5, the table's
// order and ratios, the SVG plot's geometry, llama.cpp reference sizes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "base/error.h"
#include "veloxquant/eval/bench_report.h"
#include "veloxquant/eval/eval_record.h"
#include "veloxquant/eval/quality_plot_svg.h"
#include "veloxquant/eval/reference_formats.h"
#include "veloxquant/eval/results_table.h"

namespace veloxquant::eval {
namespace {

EvalRecord record(std::string method, std::string bits, double bytes, double kld) {
  EvalRecord r;
  r.model = "m.gguf";
  r.method = std::move(method);
  r.bits = std::move(bits);
  r.chunking = "sliding";
  r.ctx = 512;
  r.n_tokens = 1000;
  r.ppl = 10.5;
  r.ppl_baseline = 10.0;
  r.kld = kld;
  r.kld_max = kld * 10;
  r.top1_agreement = 95.0;
  r.kv_bytes_per_token = bytes;
  r.kv_bytes_per_token_baseline = 2048.0;
  r.tok_per_s = 100.0;
  r.tok_per_s_baseline = 120.0;
  r.peak_rss_bytes = 1 << 20;
  return r;
}

TEST(EvalRecordJson, HasEveryKeyTheIssueLists) {
  const nlohmann::json j = to_json(record("kivi", "2", 512.0, 0.01));
  for (const char* key :
       {"ppl", "ppl_baseline", "kld", "top1_agreement", "kv_bytes_per_token", "kv_bytes_per_token_baseline",
        "peak_rss_bytes", "tok_per_s", "tok_per_s_baseline", "method", "bits", "model", "ctx", "n_tokens"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["method"], "kivi");
  EXPECT_EQ(j["ctx"], 512);
  EXPECT_DOUBLE_EQ(j["kld"].get<double>(), 0.01);
}

TEST(EvalRecordJson, NonFiniteBecomesNullAndRoundTrips) {
  EvalRecord r = record("broken", "1", 100.0, std::numeric_limits<double>::infinity());
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j["kld"].is_null());
  const EvalRecord back = record_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_TRUE(std::isinf(back.kld));
  EXPECT_EQ(back.method, "broken");
  EXPECT_DOUBLE_EQ(back.kv_bytes_per_token, 100.0);
  EXPECT_DOUBLE_EQ(back.ppl_baseline, 10.0);
  EXPECT_THROW(record_from_json(nlohmann::json::array()), base::FormatError);
  EXPECT_THROW(record_from_json(nlohmann::json{{"ppl", 1.0}}), base::FormatError);
}

TEST(ResultsTable, SortedByBytesWithBaselineRowFirst) {
  const std::string table = markdown_results_table(
      {record("big", "8", 1100.0, 1e-5), record("small", "2", 400.0, 0.2), record("mid", "4", 640.0, 0.01)});
  const auto baseline = table.find("native cache (baseline)");
  const auto small = table.find("| small |");
  const auto mid = table.find("| mid |");
  const auto big = table.find("| big |");
  ASSERT_NE(baseline, std::string::npos);
  EXPECT_LT(baseline, small);
  EXPECT_LT(small, mid);
  EXPECT_LT(mid, big);
  // 2048 / 400 = 5.12x smaller; dPPL = 10.5 - 10.0.
  EXPECT_NE(table.find("| 400.0 | 5.12 |"), std::string::npos) << table;
  EXPECT_NE(table.find("+0.5000"), std::string::npos) << table;
  EXPECT_NE(table.find("1.00e-05"), std::string::npos) << table;
  EXPECT_THROW(markdown_results_table({}), base::InvalidArgument);
}

TEST(FormatMetric, SmallValuesKeepTheirDigits) {
  EXPECT_EQ(format_metric(0.0), "0");
  EXPECT_EQ(format_metric(1.234e-5), "1.23e-05");
  EXPECT_EQ(format_metric(0.1234), "0.1234");
  EXPECT_EQ(format_metric(std::numeric_limits<double>::infinity()), "inf");
}

// cy of the circle whose <title> is `label`.
double circle_y(const std::string& svg, const std::string& label) {
  const std::regex re("<circle cx=\"([0-9.]+)\" cy=\"([0-9.]+)\"[^>]*><title>" + label + "</title>");
  std::smatch m;
  if (!std::regex_search(svg, m, re)) return std::nan("");
  return std::stod(m[2]);
}

TEST(QualityPlot, LowerKlIsLowerAndReferencesAreDrawn) {
  const std::vector<EvalRecord> recs{record("a", "2", 400.0, 1e-1), record("b", "4", 640.0, 1e-3),
                                     record("exact", "", 2048.0, 0.0)};
  const std::string svg =
      quality_plot_svg(recs, {{"native cache", 2048.0}, {"llama.cpp q8_0 (bytes only)", 1088.0}}, "t <x>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("t &lt;x&gt;"), std::string::npos);
  EXPECT_NE(svg.find("llama.cpp q8_0 (bytes only)"), std::string::npos);
  const double ya = circle_y(svg, "a b=2"), yb = circle_y(svg, "b b=4"), yexact = circle_y(svg, "exact \\(KL=0\\)");
  ASSERT_FALSE(std::isnan(ya));
  ASSERT_FALSE(std::isnan(yb));
  ASSERT_FALSE(std::isnan(yexact));
  // SVG y grows downwards: more loss (larger KL) must be drawn higher (smaller y).
  EXPECT_LT(ya, yb);
  EXPECT_GT(yexact, yb);  // KL = 0 sits in the strip under the lowest decade
  // Two decades apart on a log axis spanning 1e-3..1e-1 = the plot height minus the KL=0 strip.
  EXPECT_NEAR(yb - ya, 540.0 - 56.0 - 70.0 - 24.0, 0.2);
  EXPECT_THROW(quality_plot_svg({}, {}, "x"), base::InvalidArgument);
}

TEST(ReferenceFormats, LlamaCppBlockSizes) {
  // SmolLM2-135M: 30 layers x (K and V) x 3 kv heads x 64 = 11,520 elements per token.
  const int64_t elements = int64_t{30} * 2 * 3 * 64;
  double f16 = 0, q8 = 0, q4 = 0;
  for (const auto& f : llama_cpp_kv_formats()) {
    if (f.name == "f16") f16 = reference_bytes_per_token(f.bits_per_element, elements);
    if (f.name == "q8_0") q8 = reference_bytes_per_token(f.bits_per_element, elements);
    if (f.name == "q4_0") q4 = reference_bytes_per_token(f.bits_per_element, elements);
  }
  EXPECT_DOUBLE_EQ(f16, 23040.0);
  EXPECT_DOUBLE_EQ(q8, 11520.0 * 34.0 / 32.0);  // 32 int8 + one fp16 scale per block
  EXPECT_DOUBLE_EQ(q4, 11520.0 * 18.0 / 32.0);  // 16 bytes of nibbles + scale
}

TEST(BenchReport, WritesJsonTableAndPlotWithTheCommand) {
  BenchReport report;
  report.command = "veloxquant bench-methods --model m.gguf --text t.txt --out x";
  report.model = "models/m.gguf";
  report.text = "t.txt";
  report.records = {record("wide", "8", 900.0, 1e-4), record("narrow", "2", 300.0, 0.3)};
  report.skipped = {{"qjl", "", "standalone method"}};
  report.references = {{"native cache (measured)", 2048.0}};
  const auto dir = std::filesystem::temp_directory_path() / ("vq_bench_report_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  write_bench_report(report, dir.string());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const nlohmann::json j = nlohmann::json::parse(slurp(dir / "results.json"));
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["method"], "narrow");  // sorted by bytes/token
  EXPECT_EQ(j["results"][1]["method"], "wide");
  EXPECT_EQ(j["skipped"][0]["method"], "qjl");
  EXPECT_EQ(j["command"], report.command);
  const std::string md = slurp(dir / "results.md");
  EXPECT_NE(md.find(report.command), std::string::npos);
  EXPECT_NE(md.find("qjl: standalone method"), std::string::npos);
  EXPECT_NE(md.find("](results.svg)"), std::string::npos);
  EXPECT_EQ(slurp(dir / "results.svg").rfind("<svg", 0), 0u);
  std::filesystem::remove_all(dir);
  report.records.clear();
  EXPECT_THROW(write_bench_report(report, dir.string()), base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant::eval
