// `--kv-dtype q8_0|q5_0|q4_0` / `--kv-dtypes` end to end (lm/cache/kv_cache_type.h): a bad name fails
// before the model is opened, naming the value and the accepted ones; a block type that cannot
// take the model's head dim says why; the rules that keep a block type from becoming a
// baseline; generate on SmolLM2 reports the q4_0 cache's real size beside the f16 cache's.
// Runs the built binary (target veloxquant_cli) the way a user does.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/cli_run.h"

namespace {

using test_support::run_cli;
using RunResult = test_support::CliResult;

const std::string kStories = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kSmolLM2 = std::string(VQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(KvDtypeFlags, UnknownTypeFailsBeforeLoadingInEveryCommand) {
  for (const std::string command :
       {"generate -p hi", "eval --text /nonexistent.txt", "bench-host", "eval-needle --text /nonexistent.txt"}) {
    const RunResult r = run_cli(command + " -m /nonexistent.gguf --kv-dtype q3_0");
    EXPECT_NE(r.exit_code, 0) << command;
    EXPECT_NE(r.err.find("unknown KV cache type 'q3_0' (expected f16, bf16, f32, q8_0, q5_0 or q4_0)"),
              std::string::npos)
        << command << ": " << r.err;
  }
  const RunResult list = run_cli(
      "bench-methods -m /nonexistent.gguf --text /nonexistent.txt --out /nonexistent_dir "
      "--kv-dtypes q8_0,q4_1");
  EXPECT_NE(list.exit_code, 0);
  EXPECT_NE(list.err.find("unknown KV cache type 'q4_1'"), std::string::npos) << list.err;
}

TEST(ModelFlags, ThreadsIsParsedOneWayInEveryCommand) {
  // --model/--tokenizer/--threads/--kv-dtype are declared once (apps/model_loading.h); --threads
  // used to be a CLI11 int in some commands and checked text in others.
  const std::string text = std::string(VQ_SHARED_DIR) + "/data/tinyshakespeare.txt";
  const std::vector<std::string> commands = {"generate -p hi -n 1", "eval --ctx 16 --text " + text, "bench-host",
                                             "eval-needle --text " + text};
  for (const std::string& command : commands) {
    std::string with_model = command;
    with_model.append(" -m ").append(kStories);
    const RunResult bad = run_cli(with_model + " --threads abc");
    EXPECT_EQ(bad.exit_code, 2) << command;
    EXPECT_NE(bad.err.find("--threads expects an integer, got 'abc'"), std::string::npos) << command << ": " << bad.err;
    const RunResult wide = run_cli(with_model + " --threads 4294967298");
    EXPECT_EQ(wide.exit_code, 2) << command;
    EXPECT_NE(wide.err.find("--threads must be in [0, 4096], got 4294967298"), std::string::npos)
        << command << ": " << wide.err;
  }
}

TEST(KvDtypeFlags, BlockTypeIsTheCacheUnderTestNeverTheBaseline) {
  const RunResult with_preset =
      run_cli("eval -m /nonexistent.gguf --text /nonexistent.txt --kv-dtype q4_0 --preset q4");
  EXPECT_NE(with_preset.exit_code, 0);
  EXPECT_NE(with_preset.err.find("--kv-dtype q4_0 is itself the cache under test"), std::string::npos)
      << with_preset.err;
  const RunResult bench = run_cli("bench-methods -m " + kStories +
                                  " --text /nonexistent.txt --out /nonexistent_dir "
                                  "--kv-dtype q8_0 --presets q4");
  EXPECT_NE(bench.exit_code, 0);
  EXPECT_NE(bench.err.find("--kv-dtypes q8_0"), std::string::npos) << bench.err;
  const RunResult alone = run_cli("bench-host -m " + kStories + " --kv-dtypes q8_0");
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.err.find("--kv-dtypes needs --methods"), std::string::npos) << alone.err;
}

TEST(KvDtypeFlags, HeadDimThatIsNotAMultipleOf32IsRefusedClearly) {
  // stories260K has head_dim 8: llama.cpp's blocks hold 32 elements of one row.
  const RunResult r = run_cli("generate -m " + kStories + " -p 'Once upon a time' -n 4 --kv-dtype q8_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("q8_0 needs a head dim that is a multiple of 32, got 8"), std::string::npos) << r.err;
}

TEST(KvDtypeFlags, GenerateOnSmolLM2StoresQ4_0Blocks) {
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << kSmolLM2 << " is not here";
  const RunResult r =
      run_cli("generate -m " + kSmolLM2 + " -p 'The capital of France is' -n 6 --temp 0 --kv-dtype q4_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  // 256 allocated rows x 6480 bytes = 1.58 MiB, against 256 x 23040 for f16 (3.56x).
  EXPECT_NE(r.err.find("KV 1.58 MiB resident"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("native f16 cache (3.56x smaller"), std::string::npos) << r.err;
}

}  // namespace
