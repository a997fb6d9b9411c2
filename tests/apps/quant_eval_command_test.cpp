// `veloxquant quant-eval --json` prints one object with exactly the issue's keys, and bad
// input exits non-zero with a message naming the value. Runs the built CLI (skips when the
// binary has not been built in this build tree).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

namespace {
std::string cli() { return std::string(VQ_BINARY_DIR) + "/veloxquant"; }

// Runs a command, returns (exit status, stdout+stderr).
std::pair<int, std::string> run(const std::string& args) {
  const std::string command = cli() + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof buffer, pipe)) out += buffer;
  const int status = pipe ? pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}
}  // namespace

TEST(QuantEvalCommand, JsonHasExactlyTheIssueKeys) {
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "CLI not built at " << cli();
  const auto [status, out] = run("quant-eval --method turboquant_mse --bits 2 --dim 128 --n 500 --seed 3 --json");
  ASSERT_EQ(status, 0) << out;
  const auto j = nlohmann::json::parse(out);
  std::set<std::string> keys;
  for (const auto& item : j.items()) keys.insert(item.key());
  const std::set<std::string> expected = {"method",
                                          "bits",
                                          "dim",
                                          "n",
                                          "mse",
                                          "ip_bias",
                                          "ip_bias_se",
                                          "ip_var_scaled",
                                          "shrink",
                                          "bytes_per_vector",
                                          "encode_vectors_per_s",
                                          "score_vectors_per_s"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(j["method"], "turboquant_mse");
  EXPECT_EQ(j["bytes_per_vector"], 34);
  EXPECT_EQ(j["n"], 500);
  // TurboQuant b = 2: D_mse = 0.117 (paper), within 10% at n = 500.
  EXPECT_NEAR(j["mse"].get<double>(), 0.117, 0.0117);
}

TEST(QuantEvalCommand, BadInputExitsWithTheValueNamed) {
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "CLI not built at " << cli();
  auto [status, out] = run("quant-eval --method turboquant_rvq --bits 11");
  EXPECT_EQ(status, 2);
  EXPECT_NE(out.find("11"), std::string::npos) << out;
  std::tie(status, out) = run("quant-eval --method frobnicate");
  EXPECT_EQ(status, 2);
  EXPECT_NE(out.find("frobnicate"), std::string::npos) << out;
  std::tie(status, out) = run("quant-eval --method qjl --n 0");
  EXPECT_EQ(status, 2);
}
