// `veloxquant bench-host` on stories260K (context 512, 5 layers, 4 KV heads of 8, vocab 512)
// with tiny contexts: the JSON record has exactly its keys, the rows their token counts and
// the KV bytes the native cache really allocates; bad input exits non-zero naming the value.
// Timings are never asserted, only invariants between the reported numbers. Runs the built
// CLI (skips when the binary has not been built in this build tree).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

namespace {
std::string cli() { return std::string(VQ_BINARY_DIR) + "/veloxquant"; }
std::string model() { return std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf"; }
std::string text() { return std::string(VQ_SHARED_DIR) + "/data/tinystories_valid_head794k.txt"; }

// Runs a command, returns (exit status or -1 when it did not exit normally, stdout).
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

// One f16 row of every layer's keys and values: 5 layers * 2 * 4 heads * 8 dims * 2 bytes.
constexpr std::size_t kRowBytes = std::size_t{5} * 2 * 4 * 8 * 2;
}  // namespace

TEST(BenchHostCommand, JsonRecordHasItsKeysAndExactRows) {
  if (!ready()) GTEST_SKIP() << "CLI or stories260K missing";
  const auto [status, out] =
      run("bench-host --model " + model() + " --ctx 16,300 --decode-tokens 4 --prefill 32 --threads 1 --json", false);
  ASSERT_EQ(status, 0) << out;
  const auto j = nlohmann::json::parse(out);
  std::set<std::string> keys;
  for (const auto& item : j.items()) keys.insert(item.key());
  const std::set<std::string> expected = {"command",      "version",        "model",          "model_name",
                                          "architecture", "context_length", "threads",        "build_type",
                                          "cpu",          "simd_target",    "method",         "bits",
                                          "settings",     "kv_dtype",       "prompt",         "decode_tokens",
                                          "batch",        "repeat",         "peak_rss_bytes", "rows",
                                          "decode_statistic"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(j["context_length"], 512);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["method"], "none");
  EXPECT_EQ(j["kv_dtype"], "f16");
  EXPECT_EQ(j["prompt"], "pattern");
  EXPECT_EQ(j["batch"], 512);
  EXPECT_FALSE(j["cpu"].get<std::string>().empty());
  EXPECT_FALSE(j["simd_target"].get<std::string>().empty());
  EXPECT_FALSE(j["build_type"].get<std::string>().empty());
  // The weights alone are ~1 MiB; a peak below that would be a unit error.
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 1 << 20);

  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["kind"], "prefill");
  EXPECT_EQ(rows[0]["ctx"], 32);
  EXPECT_EQ(rows[0]["prefill_tokens"], 32);
  EXPECT_EQ(rows[0]["decode_tokens"], 0);
  EXPECT_EQ(rows[0]["decode_tokens_per_s"], 0.0);
  // A decode row ends with ctx tokens cached: ctx - 4 prefilled, 4 decoded.
  EXPECT_EQ(rows[1]["kind"], "decode");
  EXPECT_EQ(rows[1]["ctx"], 16);
  EXPECT_EQ(rows[1]["prefill_tokens"], 12);
  EXPECT_EQ(rows[1]["decode_tokens"], 4);
  EXPECT_EQ(rows[2]["ctx"], 300);
  EXPECT_EQ(rows[2]["prefill_tokens"], 296);
  // The native cache grows in steps of 256 rows (full_kv_cache.cpp): 32 and 16 tokens hold
  // 256 rows, 296 prefilled tokens take two steps (512 rows) and the 4 decode steps fit.
  EXPECT_EQ(rows[0]["kv_bytes"], 256 * kRowBytes);
  EXPECT_EQ(rows[1]["kv_bytes"], 256 * kRowBytes);
  EXPECT_EQ(rows[2]["kv_bytes"], 512 * kRowBytes);
  for (const auto& row : rows) {
    const double prefill_seconds = row["prefill_seconds"];
    ASSERT_GT(prefill_seconds, 0.0);
    EXPECT_NEAR(row["prefill_tokens_per_s"].get<double>() * prefill_seconds, row["prefill_tokens"].get<double>(),
                1e-6 * row["prefill_tokens"].get<double>());
    if (row["decode_tokens"] == 0) continue;
    const double tps = row["decode_tokens_per_s"];
    ASSERT_GT(tps, 0.0);
    EXPECT_NEAR(tps * row["decode_ms_per_token"].get<double>(), 1000.0, 1e-6);
    EXPECT_NEAR(tps * row["decode_seconds"].get<double>(), 4.0, 1e-9);
  }
}

TEST(BenchHostCommand, TableTextPromptAndCompressedCache) {
  if (!ready()) GTEST_SKIP() << "CLI or stories260K missing";
  auto [status, out] = run("bench-host --model " + model() +
                               " --ctx 40 --decode-tokens 8 --prefill 0 --repeat 2 "
                               "--threads 1 --text " +
                               text(),
                           false);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("| decode | 40 | 32 |"), std::string::npos) << out;
  EXPECT_EQ(out.find("| prefill |"), std::string::npos) << out;  // --prefill 0: no such row
  EXPECT_NE(out.find("best of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("peak RSS"), std::string::npos) << out;

  // A compressed cache is timed through the same loop; it holds fewer bytes than the f16 one.
  std::tie(status, out) = run("bench-host --model " + model() +
                                  " --ctx 64 --decode-tokens 4 --prefill 0 "
                                  "--threads 1 --method kivi --bits 2 --json",
                              false);
  ASSERT_EQ(status, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["method"], "kivi");
  EXPECT_EQ(j["bits"], "2");
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_GT(j["rows"][0]["kv_bytes"].get<std::size_t>(), 0u);
  EXPECT_LT(j["rows"][0]["kv_bytes"].get<std::size_t>(), 256 * kRowBytes);
}

TEST(BenchHostCommand, BadInputExitsNonZeroNamingTheValue) {
  if (!ready()) GTEST_SKIP() << "CLI or stories260K missing";
  const std::string base = "bench-host --model " + model() + " --threads 1 ";
  auto [status, out] = run(base + "--ctx 0", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--ctx values must be >= 2, got 0"), std::string::npos) << out;

  std::tie(status, out) = run(base + "--ctx 64,1024", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--ctx 1024 is beyond the model's context length 512"), std::string::npos) << out;

  std::tie(status, out) = run(base + "--prefill 600 --ctx 64", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("600"), std::string::npos) << out;

  std::tie(status, out) = run(base + "--ctx 32 --decode-tokens 32", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--ctx 32 leaves no prompt token"), std::string::npos) << out;

  std::tie(status, out) = run(base + "--ctx 64 --method frobnicate", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("frobnicate"), std::string::npos) << out;

  std::tie(status, out) = run(base + "--ctx 64 --repeat 0", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--repeat must be >= 1, got 0"), std::string::npos) << out;

  std::tie(status, out) = run(base + "--ctx 64 --decode-stat mean", true);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--decode-stat must be 'total' or 'median', got 'mean'"), std::string::npos) << out;

  std::tie(status, out) = run(base + "--ctx 64,abc", true);  // CLI11 rejects it: non-zero, no crash
  EXPECT_GT(status, 0) << out;

  std::tie(status, out) = run("bench-host --model /nonexistent/model.gguf --ctx 64", true);
  EXPECT_GT(status, 0) << out;
  EXPECT_NE(out.find("/nonexistent/model.gguf"), std::string::npos) << out;
}
