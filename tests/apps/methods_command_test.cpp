// The CLI end to end: `veloxquant methods` (the JSON contract, filters) and `veloxquant generate
// --method/--bits/--set` (validated before the model loads, wired through patch_model_kv_cache).
// Runs the built binary (target veloxquant_cli) the way a user does.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "veloxquant/veloxquant.h"

#include "support/cli_run.h"

namespace {

using test_support::run_cli;
using RunResult = test_support::CliResult;

const std::string kStories = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

TEST(MethodsCommand, JsonListsTheRegistry) {
  const RunResult r = run_cli("methods --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("schema_version"), 1);
  std::vector<std::string> names;
  for (const auto& m : j.at("methods")) names.push_back(m.at("name"));
  std::vector<std::string> registry;
  for (const auto& m : veloxquant::method_registry()) registry.push_back(m.name);
  EXPECT_EQ(names, registry);  // same order: servable first, then by name
  for (const auto& m : j.at("methods")) {
    for (const char* key : {"family", "is_servable", "trimmable", "fused_attention", "fields", "paper"}) {
      EXPECT_TRUE(m.contains(key)) << m.at("name") << " lacks " << key;
    }
  }
}

TEST(MethodsCommand, AnUnwritableStdoutFailsTheCommand) {
  // /dev/full: every write fails with ENOSPC, as on a full disk. The listing must not exit 0.
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::string binary = std::string(VQ_BINARY_DIR) + "/veloxquant";
  const std::string err =
      (std::filesystem::temp_directory_path() / ("vq_full_err_" + std::to_string(::getpid()))).string();
  for (const std::string command : {"methods", "methods --json", "version"}) {
    std::string line = binary;
    line.append(" ").append(command).append(" >/dev/full 2>").append(err);
    const int status = std::system(line.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << command;
    EXPECT_EQ(WEXITSTATUS(status), 1) << command;
    EXPECT_NE(test_support::read_file_text(err).find("writing standard output failed"), std::string::npos) << command;
  }
  std::filesystem::remove(err);
}

TEST(MethodsCommand, Filters) {
  const RunResult servable = run_cli("methods --json --servable-only");
  ASSERT_EQ(servable.exit_code, 0) << servable.err;
  const auto j = nlohmann::json::parse(servable.out);
  EXPECT_EQ(j.at("methods").size(), veloxquant::servable_method_names().size());
  for (const auto& m : j.at("methods")) EXPECT_TRUE(m.at("is_servable").get<bool>());
  const RunResult eviction = run_cli("methods --json --family eviction");
  ASSERT_EQ(eviction.exit_code, 0);
  const nlohmann::json eviction_rows = nlohmann::json::parse(eviction.out);
  std::size_t registered_eviction = 0;
  for (const veloxquant::MethodDescriptor& m : veloxquant::method_registry())
    registered_eviction += m.family == "eviction";
  EXPECT_EQ(eviction_rows.at("methods").size(), registered_eviction);
  EXPECT_GE(registered_eviction, 8u);
  for (const auto& m : eviction_rows.at("methods")) EXPECT_FALSE(m.at("trimmable").get<bool>());
  EXPECT_NE(run_cli("methods --family vibes").exit_code, 0);
  const RunResult text = run_cli("methods");
  EXPECT_NE(text.out.find("turboquant_rvq"), std::string::npos);
}

TEST(GenerateMethodFlags, BadMethodsFailBeforeLoading) {
  // A model path that does not exist: the config must be refused before it is ever opened.
  const RunResult standalone = run_cli("generate -m /nonexistent.gguf -p hi --method qjl");
  EXPECT_EQ(standalone.exit_code, 2);
  EXPECT_NE(standalone.err.find("standalone"), std::string::npos) << standalone.err;
  const RunResult unknown = run_cli("generate -m /nonexistent.gguf -p hi --method nope");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("valid methods"), std::string::npos) << unknown.err;
  const RunResult bad_set = run_cli("generate -m /nonexistent.gguf -p hi --method kivi --set kivi_group_size=0");
  EXPECT_EQ(bad_set.exit_code, 2);
  EXPECT_NE(bad_set.err.find("kivi_group_size"), std::string::npos) << bad_set.err;
}

TEST(GenerateMethodFlags, APromptCacheLoadsOnlyUnderTheFlagsItWasSavedWith) {
  // Loaded under other cache flags it would run as saved while the stats line names the flags
  // given: a wrong measurement, so it is refused, naming both.
  const std::string file =
      (std::filesystem::temp_directory_path() / ("vq_flags_" + std::to_string(::getpid()) + ".vqpc")).string();
  const RunResult save =
      run_cli("generate -m " + kStories + " -p 'Once upon' -n 4 --method kivi --bits 4 --save-prompt-cache " + file);
  ASSERT_EQ(save.exit_code, 0) << save.err;
  const RunResult same =
      run_cli("generate -m " + kStories + " -p ' a time' -n 4 --method kivi --bits 4 --load-prompt-cache " + file);
  EXPECT_EQ(same.exit_code, 0) << same.err;
  const RunResult none = run_cli("generate -m " + kStories + " -p ' a time' -n 4 --load-prompt-cache " + file);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("was saved with --method kivi --bits 4; this run asks for --method none"), std::string::npos)
      << none.err;
  const RunResult bits =
      run_cli("generate -m " + kStories + " -p ' a time' -n 4 --method kivi --bits 2 --load-prompt-cache " + file);
  EXPECT_EQ(bits.exit_code, 2) << bits.err;
  const RunResult dtype =
      run_cli("generate -m " + kStories +
              " -p ' a time' -n 4 --method kivi --bits 4 --kv-dtype f32 --load-prompt-cache " + file);
  EXPECT_EQ(dtype.exit_code, 2);
  EXPECT_NE(dtype.err.find("--kv-dtype f16; this run asks for --kv-dtype f32"), std::string::npos) << dtype.err;
  std::filesystem::remove(file);
}

TEST(GenerateMethodFlags, WiresTheCacheAndReportsBytes) {
  const RunResult wrong = run_cli("generate -m " + kStories + " -p 'Once upon a time' -n 8 --method kivi --bits 2,2");
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("5 attention layers"), std::string::npos) << wrong.err;
  const RunResult ok = run_cli("generate -m " + kStories +
                               " -p 'Once upon a time' -n 16 --method turboquant_rvq --bits 4 --set rvq_value_bits=4");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("Wired 5 layer cache(s) with 'turboquant_rvq' (fresh per call)"), std::string::npos) << ok.err;
  EXPECT_NE(ok.err.find("for the native f16 cache"), std::string::npos) << ok.err;
  EXPECT_NE(ok.err.find("x smaller; bare f16 rows"), std::string::npos) << ok.err;
  EXPECT_FALSE(ok.out.empty());
  const RunResult irrelevant = run_cli("generate -m " + kStories +
                                       " -p 'Once upon a time' -n 4 --method turboquant_rvq --set kivi_group_size=16");
  EXPECT_EQ(irrelevant.exit_code, 0) << irrelevant.err;
  EXPECT_NE(irrelevant.err.find("warning: field 'kivi_group_size' is not read by method 'turboquant_rvq'"),
            std::string::npos)
      << irrelevant.err;
}

}  // namespace
