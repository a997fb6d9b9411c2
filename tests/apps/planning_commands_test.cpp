// The planning commands users reach for before serving: auto-config (the original's rules),
// estimate-memory (real caches fed random rows; bench-methods records override) and recommend
// (chosen from measured records by objective). Runs the built binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/cli_run.h"

namespace {

using nlohmann::json;
using test_support::run_cli;

const std::string kStories = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

json run_json(const std::string& args) {
  const test_support::CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
  return json::parse(r.out, nullptr, false);
}

TEST(AutoConfig, TheOriginalsRulesInOrder) {
  const std::string plenty = " --memory-gb 1000 --used-gb 0 --json";
  const json short_ctx = run_json("auto-config --seq-len 1024" + plenty);
  EXPECT_EQ(short_ctx["method"], "turboquant_rvq");
  EXPECT_EQ(short_ctx["bits"], 4);
  const json mid = run_json("auto-config --seq-len 4096" + plenty);
  EXPECT_EQ(mid["method"], "kivi");
  EXPECT_EQ(mid["bits"], 2);
  EXPECT_EQ(mid["flags"], "--method kivi --bits 2 --set kivi_group_size=32");
  EXPECT_EQ(mid["fp16_kv_bytes"].get<double>(), 2.0 * 32 * 8 * 4096 * 128 * 2);  // 2·B·L·H·S·D·2
  EXPECT_EQ(run_json("auto-config --seq-len 4096 --head-dim 256" + plenty)["set"][0], "kivi_group_size=64");
  const json long_ctx = run_json("auto-config --seq-len 16384" + plenty);
  EXPECT_EQ(long_ctx["method"], "kivi");
  EXPECT_EQ(long_ctx["bits"], 3);
  // Memory pressure wins over the context rules: 0.5 GiB used + 0.5 GiB of f16 KV on 1 GiB.
  const json pressure =
      run_json("auto-config --seq-len 1024 --n-layers 32 --kv-heads 32 --memory-gb 1 --used-gb 0.5 --json");
  EXPECT_EQ(pressure["method"], "kivi");
  EXPECT_EQ(pressure["bits"], 2);
  EXPECT_NE(pressure["rule"].get<std::string>().find("rule 1"), std::string::npos);
  const test_support::CliResult bad = run_cli("auto-config --seq-len 0");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--seq-len must be in [1,"), std::string::npos) << bad.err;
}

TEST(EstimateMemory, NativeBytesAreExactAndCompressedOnesSmaller) {
  // stories260K: 5 layers, 4 KV heads x 8; the host's f16 cache at 512 tokens is
  // 5 * 2 * 4 * 8 * 512 * 2 bytes.
  const json j = run_json("estimate-memory -m " + kStories + " --context 512 --json");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["native_f16_bytes"].get<double>(), 5.0 * 2 * 4 * 8 * 512 * 2);
  double previous = 0;
  bool saw_kivi = false, saw_preset = false;
  for (const json& e : j["estimates"]) {
    EXPECT_GE(e["bytes"].get<double>(), previous);  // smallest first
    previous = e["bytes"];
    if (e["method"] == "kivi") {
      saw_kivi = true;
      EXPECT_LT(e["bytes"].get<double>(), j["native_f16_bytes"].get<double>());
    }
    saw_preset |= e["label"] == "preset q4";
  }
  EXPECT_TRUE(saw_kivi);
  EXPECT_TRUE(saw_preset);
  // Past the measured length the growth is extrapolated: exact for the host's cache.
  const json far = run_json(
      "estimate-memory --layers 5 --heads 8 --kv-heads 4 --head-dim 8 --context 8192 "
      "--measure-tokens 1024 --method kivi --bits 4 --json");
  ASSERT_EQ(far["estimates"].size(), 1u);
  EXPECT_EQ(far["native_f16_bytes"].get<double>(), 5.0 * 2 * 4 * 8 * 8192 * 2);
  EXPECT_NE(far["estimates"][0]["source"].get<std::string>().find("extrapolated"), std::string::npos);
}

TEST(EstimateMemory, MeasuredRecordsOverrideTheEstimate) {
  const auto path = std::filesystem::temp_directory_path() / "vq_results_override.json";
  std::ofstream(path) << R"({"results": [{"model": "x/stories260K.gguf", "method": "kivi", "bits": "4", "settings": "",
                              "kv_bytes_per_token": 100.0, "ctx": 2048}]})";
  const json j = run_json("estimate-memory -m " + kStories + " --context 1000 --method kivi --bits 4 --results " +
                          path.string() + " --json");
  ASSERT_EQ(j["estimates"].size(), 1u);
  EXPECT_EQ(j["estimates"][0]["bytes"].get<double>(), 100000.0);
  EXPECT_NE(j["estimates"][0]["source"].get<std::string>().find("bench-methods"), std::string::npos);
  std::filesystem::remove(path);
  const test_support::CliResult bad = run_cli("estimate-memory --results /nonexistent.json");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("/nonexistent.json"), std::string::npos) << bad.err;
}

TEST(Recommend, PicksByObjectiveFromMeasurements) {
  const auto path = std::filesystem::temp_directory_path() / "vq_results_recommend.json";
  std::ofstream(path) << R"({"results": [
    {"model": "m.gguf", "method": "kivi", "bits": "2", "settings": "", "kv_bytes_per_token": 6000, "kld": 0.4,
     "top1_agreement": 60, "tok_per_s": 90, "tok_per_s_baseline": 100},
    {"model": "m.gguf", "method": "kivi", "bits": "4", "settings": "", "kv_bytes_per_token": 9000, "kld": 0.01,
     "top1_agreement": 94, "tok_per_s": 80, "tok_per_s_baseline": 100},
    {"model": "m.gguf", "method": "turboquant_rvq", "bits": "4", "settings": "rvq_value_bits=4", "kv_bytes_per_token": 12000,
     "kld": 0.001, "top1_agreement": 98, "tok_per_s": 95, "tok_per_s_baseline": 100}]})";
  const std::string results = " --results " + path.string() + " --json";
  EXPECT_EQ(run_json("recommend --objective memory" + results)["flags"],
            "--method kivi --bits 4");  // 60% top-1 is below the floor
  EXPECT_EQ(run_json("recommend --objective memory --min-top1 50" + results)["flags"], "--method kivi --bits 2");
  EXPECT_EQ(run_json("recommend --objective quality" + results)["flags"],
            "--method turboquant_rvq --bits 4 --set rvq_value_bits=4");
  EXPECT_EQ(run_json("recommend --objective latency" + results)["method"], "turboquant_rvq");
  const json balanced = run_json("recommend" + results);
  EXPECT_EQ(balanced["method"], "turboquant_rvq");  // 0.001 x 12000 < 0.01 x 9000
  EXPECT_NE(balanced["why"].get<std::string>().find("runner-up --method kivi --bits 4"), std::string::npos) << balanced;
  const test_support::CliResult bad = run_cli("recommend --objective speed" + results);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--objective must be memory, latency, quality or balanced, got 'speed'"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
