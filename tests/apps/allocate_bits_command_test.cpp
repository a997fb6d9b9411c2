// `veloxquant allocate-bits` end to end on the 260K-parameter stories model (5 attention
// layers): the lists it prints have one entry per attention layer, stay within the budget it
// reports, and the check runs both configurations; bad flags fail with the flag's name before
// the model is read.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/cli_run.h"

namespace {

using test_support::run_cli;

const std::string kStories = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kText = std::string(VQ_SHARED_DIR) + "/data/tinystories_valid_head794k.txt";

TEST(AllocateBits, PrintsOneEntryPerAttentionLayerWithinTheBudget) {
  const test_support::CliResult r =
      run_cli("allocate-bits -m " + kStories + " --text " + kText +
              " --method turboquant_block --set key_bits=3 --set value_bits=3 --candidate-bits 2,3,4 --measure-bits 3"
              " --ctx 64 --chunks 2 --threads 1 --budget-rows 256");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\nkey_bits=([0-9,]+)\n)"))) << r.out;
  const std::string keys = m[1];
  EXPECT_EQ(std::count(keys.begin(), keys.end(), ','), 4) << keys;  // 5 layers
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\nvalue_bits=([0-9,]+)\n)"))) << r.out;
  // Within the budget (the uniform configuration's own size: no --avg-bits).
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(budget ([0-9.]+) bytes/token)"))) << r.out;
  const double budget = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(allocation: ([0-9.]+) bytes/token)"))) << r.out;
  EXPECT_LE(std::stod(m[1]), budget + 1e-9);
  // Predicted widths are marked; the check measured both configurations.
  EXPECT_NE(r.out.find('*'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nuniform "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nallocation "), std::string::npos) << r.out;
}

TEST(AllocateBits, BadFlagsNameTheFlag) {
  const std::string head = "allocate-bits -m /nonexistent.gguf --text " + kText + " ";
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"--method turboquant_block --candidate-bits 0,3", "--candidate-bits entries must lie in [1, 8], got 0"},
           {"--method turboquant_block --candidate-bits 2,x", "'--candidate-bits' expects an integer"},
           {"--method turboquant_block --measure-bits 9", "--measure-bits entries must lie in [1, 8], got 9"},
           {"--method turboquant_block --reference-bits 0", "--reference-bits must lie in [1, 8]"},
           {"--method turboquant_block --avg-bits -1", "--avg-bits must be a positive number"},
           {"--method turboquant_block --set key_bits=3,9", "key_bits must lie in [0, 8], got 9"},
           {"", "allocate-bits needs --method"},
       }) {
    const test_support::CliResult r = run_cli(head + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << ": " << r.err;
  }
}

TEST(AllocateBits, ABudgetBelowTheCheapestWidthsIsRefused) {
  const test_support::CliResult r = run_cli(
      "allocate-bits -m " + kStories + " --text " + kText +
      " --method turboquant_block --candidate-bits 3,4 --ctx 64 --chunks 1 --threads 1 --avg-bits 1 --no-check");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("above the budget"), std::string::npos) << r.err;
}

}  // namespace
