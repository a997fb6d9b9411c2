// `--preset` end to end (presets/kv_presets.h): every command that runs a model takes it; an
// unknown name or a clash with --method/--bits fails before the model is opened, naming the
// value; `methods` lists what each preset resolves to; generate reports the preset it wired.
// Runs the built binary (target veloxquant_cli) the way a user does.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "veloxquant/presets/kv_presets.h"

#include "support/cli_run.h"

namespace {

using test_support::run_cli;
using RunResult = test_support::CliResult;

const std::string kStories = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

TEST(PresetFlags, UnknownPresetFailsBeforeLoadingInEveryCommand) {
  for (const std::string command : {"generate -p hi", "eval --text /nonexistent.txt", "bench-host"}) {
    const RunResult r = run_cli(command + " -m /nonexistent.gguf --preset q6");
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("unknown preset 'q6'; presets: q8, q5, q4, q3"), std::string::npos)
        << command << ": " << r.err;
  }
  const RunResult bench =
      run_cli("bench-methods -m /nonexistent.gguf --text /nonexistent.txt --out /nonexistent_dir --presets q4,q7");
  EXPECT_EQ(bench.exit_code, 2) << bench.err;
  EXPECT_NE(bench.err.find("unknown preset 'q7'"), std::string::npos) << bench.err;
}

TEST(PresetFlags, EmptyMethodBitsOrPresetIsAnErrorNotTheDefault) {
  for (const std::string flag : {"--bits ''", "--preset ''", "--method ''"}) {
    const RunResult r = run_cli("generate -m /nonexistent.gguf -p hi " + flag);
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_NE(r.err.find("needs a value (got an empty one)"), std::string::npos) << flag << ": " << r.err;
  }
}

TEST(PresetFlags, PresetAndMethodClash) {
  const RunResult r = run_cli("generate -m /nonexistent.gguf -p hi --preset q4 --method kivi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--preset q4 resolves to"), std::string::npos) << r.err;
  const RunResult bits = run_cli("eval -m /nonexistent.gguf --text /nonexistent.txt --preset q4 --bits 2");
  EXPECT_EQ(bits.exit_code, 2);
  EXPECT_NE(bits.err.find("drop --method/--bits"), std::string::npos) << bits.err;
}

TEST(PresetFlags, MethodsListsEveryPreset) {
  const RunResult text = run_cli("methods");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const RunResult json = run_cli("methods --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j.at("presets").size(), veloxquant::kv_presets().size());
  for (std::size_t i = 0; i < veloxquant::kv_presets().size(); ++i) {
    const veloxquant::KvPreset& p = veloxquant::kv_presets()[i];
    EXPECT_EQ(j.at("presets")[i].at("name"), p.name);
    EXPECT_EQ(j.at("presets")[i].at("method"), p.method);
    EXPECT_NE(text.out.find("  " + p.name + "  = " + veloxquant::kv_preset_settings(p)), std::string::npos) << text.out;
  }
}

TEST(PresetFlags, BenchMethodsConfigsFailBeforeLoading) {
  const std::string head = "bench-methods -m /nonexistent.gguf --text /nonexistent.txt --out /nonexistent_dir ";
  const RunResult method = run_cli(head + "--config 'turboquant_blok key_bits=3'");
  EXPECT_EQ(method.exit_code, 2) << method.err;
  EXPECT_NE(method.err.find("turboquant_blok"), std::string::npos) << method.err;
  const RunResult value = run_cli(head + "--config 'q3 key_bits=9'");
  EXPECT_EQ(value.exit_code, 2) << value.err;
  EXPECT_NE(value.err.find("got 9"), std::string::npos) << value.err;
}

TEST(PresetFlags, BenchMethodsRunsEachConfigAsItsOwnSetting) {
  // Two configurations of one method in one run: a method with its fields, and a preset with one
  // field changed. stories260K: 5 layers x 4 kv heads x head_dim 8; one window of 64 tokens
  // allocates 256 rows (the caches' growth step). Per row and kv head, 3-bit keys and values take
  // ceil(8*3/8) = 3 code bytes + one f16 scale each: 10 bytes; 4-bit keys one byte more.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "vq_bench_configs_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "text.txt") << "Once upon a time there was a little girl named Lily. She liked to play outside "
                                     "in the park with her friends. One day she saw a big red ball under a tree, and "
                                     "she ran to get it. Her mom smiled and said they could play together.";
  const RunResult r = run_cli("bench-methods -m " + kStories + " --text " + (dir / "text.txt").string() +
                              " --ctx 64 --chunks 1 --chunking llama --tail 1 --out " + (dir / "out").string() +
                              " --config 'turboquant_block key_bits=3 value_bits=3'"
                              " --config 'q4 key_bits=4 value_bits=3'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(dir / "out" / "results.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.at("results").size(), 2u) << j.dump();
  const nlohmann::json& small = j.at("results")[0];  // sorted by bytes per token
  const nlohmann::json& large = j.at("results")[1];
  EXPECT_EQ(small.at("settings"), "config=key_bits=3,value_bits=3");
  EXPECT_EQ(large.at("settings"), "config=preset=q4,key_bits=5,value_bits=3,key_bits=4,value_bits=3");
  EXPECT_DOUBLE_EQ(small.at("kv_bytes_per_token").get<double>(), 5 * 4 * 10 * 256 / 64.0);  // 800
  EXPECT_DOUBLE_EQ(large.at("kv_bytes_per_token").get<double>(), 5 * 4 * 11 * 256 / 64.0);  // 880
  std::filesystem::remove_all(dir);
}

TEST(PresetFlags, GenerateWiresThePreset) {
  const RunResult r = run_cli("generate -m " + kStories + " -p 'Once upon a time' -n 8 --preset q4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("with '" + veloxquant::require_kv_preset("q4").method + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[preset q4: "), std::string::npos) << r.err;
  EXPECT_FALSE(r.out.empty());
}

}  // namespace
