// `veloxquant bench-host --methods` on stories260K (context 512, 5 layers, 4 KV heads of 8):
// one record row per method per context, the ratios taken against the native rows of the same
// run, the decode traffic built from the model's 1040384 weight bytes and each row's KV bytes,
// a valid plot with one series per method, and bad entries refused before the model loads,
// naming the entry. Timings are never asserted, only relations between reported numbers. Runs
// the built CLI (skips when it has not been built in this build tree).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {
std::string cli() { return std::string(VQ_BINARY_DIR) + "/veloxquant"; }
std::string model() { return std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf"; }

std::pair<int, std::string> run(const std::string& args, bool with_stderr) {
  const std::string command = cli() + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof buffer, pipe)) out += buffer;
  const int status = pipe ? pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool ready() { return std::filesystem::exists(cli()) && std::filesystem::exists(model()); }

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

// stories260K's parameters, all f32, each read once per decode step (decode_traffic_test.cpp
// works the number out).
constexpr double kWeightBytes = 1040384;
}  // namespace

TEST(BenchHostMethodsCommand, OneRowPerMethodPerContextAgainstNoneOfTheSameRun) {
  if (!ready()) GTEST_SKIP() << "CLI or stories260K missing";
  const std::string plot = (std::filesystem::temp_directory_path() / "vq_bench_host_methods_test.svg").string();
  std::filesystem::remove(plot);
  const auto [status, out] =
      run("bench-host --model " + model() +
              " --ctx 100,200 --decode-tokens 4 --prefill 0 --threads 1 --repeat 2 --probe-mib 16 --probe-passes 2"
              " --methods 'none; kivi --bits 4; h2o --set h2o_budget=64' --json --plot " +
              plot,
          false);
  ASSERT_EQ(status, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["methods"].size(), 3u);
  EXPECT_EQ(j["methods"][1]["label"], "kivi --bits 4");
  EXPECT_EQ(j["weight_bytes_per_decode_token"].get<double>(), kWeightBytes);
  const auto& probe = j["bandwidth_probe"];
  EXPECT_EQ(probe["bytes"], 16u << 20);
  EXPECT_EQ(probe["threads"], 1);
  EXPECT_EQ(probe["pass_bytes_per_s"].size(), 2u);
  const double probe_rate = probe["best_bytes_per_s"];
  EXPECT_GT(probe_rate, 0.0);
  EXPECT_NE(j["command"].get<std::string>().find("--methods \"none; kivi --bits 4; h2o --set h2o_budget=64\""),
            std::string::npos);

  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 6u);  // 3 methods x 2 contexts
  const char* labels[] = {"none", "kivi --bits 4", "h2o --set h2o_budget=64"};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const auto& none = rows[i / 3 * 3];
    EXPECT_EQ(row["method"], labels[i % 3]);
    EXPECT_EQ(row["ctx"], i < 3 ? 100 : 200);
    EXPECT_EQ(row["decode_tokens"], 4);
    EXPECT_EQ(row["rounds"].size(), 2u);
    const double tps = row["decode_tokens_per_s"];
    ASSERT_GT(tps, 0.0);
    EXPECT_NEAR(row["decode_ratio_to_none"].get<double>(), tps / none["decode_tokens_per_s"].get<double>(), 1e-9);
    EXPECT_NEAR(row["prefill_ratio_to_none"].get<double>(),
                row["prefill_tokens_per_s"].get<double>() / none["prefill_tokens_per_s"].get<double>(), 1e-9);
    // Bytes read per token over the time per token, and that over the probe.
    const auto& traffic = row["decode_traffic"];
    EXPECT_EQ(traffic["weight_bytes_per_token"].get<double>(), kWeightBytes);
    EXPECT_EQ(traffic["kv_bytes_per_token"], row["kv_bytes"]);
    const double seconds_per_token = row["decode_seconds"].get<double>() / 4;
    EXPECT_NEAR(traffic["bytes_per_s"].get<double>(),
                (kWeightBytes + row["kv_bytes"].get<double>()) / seconds_per_token,
                1e-9 * traffic["bytes_per_s"].get<double>());
    EXPECT_NEAR(traffic["probe_share"].get<double>(), traffic["bytes_per_s"].get<double>() / probe_rate, 1e-9);
  }
  EXPECT_EQ(rows[0]["decode_ratio_to_none"], 1.0);
  // Each row holds its own cache's bytes: the native f16 cache at 200 tokens holds 256 rows
  // (5 layers x K,V x 4 heads x 8 dims x 2 bytes each); KIVI something else (at this short
  // context its f16 residual window outweighs the saving); h2o at most 64 rows per head.
  EXPECT_EQ(rows[3]["kv_bytes"], 256u * 5 * 2 * 4 * 8 * 2);
  EXPECT_NE(rows[4]["kv_bytes"], rows[3]["kv_bytes"]);
  EXPECT_GT(rows[4]["kv_bytes"].get<std::size_t>(), 0u);
  EXPECT_LE(rows[5]["kv_bytes"].get<std::size_t>(), rows[3]["kv_bytes"].get<std::size_t>() * 64 / 200);

  std::ifstream file(plot);
  ASSERT_TRUE(file) << plot;
  std::stringstream svg;
  svg << file.rdbuf();
  EXPECT_EQ(svg.str().rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.str().find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg.str(), "<g class=\"series\""), 3);
  EXPECT_EQ(count(svg.str(), "<circle"), 6);
  std::filesystem::remove(plot);
}

TEST(BenchHostMethodsCommand, TableAndTheNativeCacheAddedWhenMissing) {
  if (!ready()) GTEST_SKIP() << "CLI or stories260K missing";
  const std::string record = (std::filesystem::temp_directory_path() / "vq_bench_host_methods_test.json").string();
  std::filesystem::remove(record);
  auto [status, out] = run("bench-host --model " + model() +
                               " --ctx 64 --decode-tokens 4 --prefill 32 --threads 1 --probe-mib 0"
                               " --methods 'kivi --bits 2' --json-out " +
                               record,
                           true);
  ASSERT_EQ(status, 0) << out;
  // --json-out: the record of the very run the table shows (2 caches x (prefill row + ctx 64)).
  std::ifstream file(record);
  ASSERT_TRUE(file) << record;
  const auto j = nlohmann::json::parse(file);
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["methods"][0]["label"], "none");
  EXPECT_TRUE(j["bandwidth_probe"].is_null());
  char decode_cell[64];
  std::snprintf(decode_cell, sizeof decode_cell, "| 64 | kivi --bits 2 | %.1f |",
                j["rows"][3]["decode_tokens_per_s"].get<double>());
  EXPECT_NE(out.find(decode_cell), std::string::npos) << decode_cell << "\n" << out;
  std::filesystem::remove(record);
  EXPECT_NE(out.find("no 'none'; timing the native cache too"), std::string::npos) << out;
  EXPECT_EQ(count(out, "| 64 | none | "), 1) << out;
  EXPECT_EQ(count(out, "| 64 | kivi --bits 2 | "), 1) << out;
  EXPECT_EQ(count(out, "| prefill 32 | "), 2) << out;
  EXPECT_NE(out.find("| 64 | none | "), std::string::npos) << out;
  EXPECT_NE(out.find("KV resident at ctx 64"), std::string::npos) << out;
  EXPECT_EQ(out.find("streaming read"), std::string::npos) << out;  // --probe-mib 0: no probe
}

TEST(BenchHostMethodsCommand, BadEntriesAreNamedBeforeTheModelLoads) {
  if (!ready()) GTEST_SKIP() << "CLI or stories260K missing";
  // A model path that does not exist: the entry error must come first, so it is not reached.
  const std::string base = "bench-host --model /nonexistent/model.gguf --ctx 64 --methods ";
  const auto expect = [&](const std::string& methods, const std::string& needle) {
    const auto [status, out] = run(base + "'" + methods + "'", true);
    EXPECT_EQ(status, 2) << methods << ": " << out;
    EXPECT_NE(out.find(needle), std::string::npos) << methods << ": " << out;
    EXPECT_EQ(out.find("/nonexistent"), std::string::npos) << out;
  };
  expect("none;kivi --bitz 4", "--methods entry 2 ('kivi --bitz 4'): unknown flag '--bitz'");
  expect("none;frobnicate", "--methods entry 2 ('frobnicate'): ");
  expect("none;frobnicate", "frobnicate");
  expect("none; kivi --bits 0", "--methods entry 2 ('kivi --bits 0'): ");
  expect("none;h2o --set h2o_budget=-5", "--methods entry 2 ('h2o --set h2o_budget=-5'): ");
  expect("none;kivi --set no_such_field=1", "no_such_field");
  expect("kivi;none --bits 4", "--methods entry 2 ('none --bits 4'): 'none' is the native cache");
  expect("none;;kivi", "--methods entry 2 (''): is empty");
  expect("none;turboquant_mse", "--methods entry 2 ('turboquant_mse'): ");

  auto [status, out] = run("bench-host --model " + model() + " --ctx 64 --method kivi --methods 'none'", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--methods and --method/--bits/--set exclude each other"), std::string::npos) << out;
  std::tie(status, out) = run("bench-host --model " + model() + " --ctx 64 --methods 'none' --probe-mib -1", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--probe-mib must be >= 0, got -1"), std::string::npos) << out;
  std::tie(status, out) = run("bench-host --model " + model() + " --ctx 64 --plot x.svg", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--plot needs --methods"), std::string::npos) << out;
  std::tie(status, out) = run("bench-host --model " + model() + " --ctx 64 --json-out x.json", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--json-out needs --methods"), std::string::npos) << out;
  // Unwritable outputs fail before the model loads (the model path is bad too, and not named).
  for (const std::string flag : {"--plot", "--json-out"}) {
    std::tie(status, out) = run("bench-host --model /nonexistent/model.gguf --ctx 64 --methods 'none' " + flag +
                                    " /nonexistent/dir/out --probe-mib 0",
                                true);
    EXPECT_EQ(status, 2) << out;
    EXPECT_NE(out.find(flag + ": cannot write '/nonexistent/dir/out'"), std::string::npos) << out;
    EXPECT_EQ(out.find("model.gguf"), std::string::npos) << out;
  }
}
