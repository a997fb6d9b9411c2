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
    EXPECT_NE(r.err.find("unknown preset 'q6'; presets: q8, q5, q4, q3"), std::string::npos) << command << ": " << r.err;
  }
  const RunResult bench = run_cli("bench-methods -m /nonexistent.gguf --text /nonexistent.txt --out /nonexistent_dir --presets q4,q7");
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

TEST(PresetFlags, GenerateWiresThePreset) {
  const RunResult r = run_cli("generate -m " + kStories + " -p 'Once upon a time' -n 8 --preset q4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("with '" + veloxquant::require_kv_preset("q4").method + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[preset q4: "), std::string::npos) << r.err;
  EXPECT_FALSE(r.out.empty());
}

}  // namespace
