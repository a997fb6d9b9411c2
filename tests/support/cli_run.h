#pragma once
// Runs the built `veloxquant` binary (target veloxquant_cli) the way a user does, for the CLI
// tests in tests/apps: exit code, stdout and stderr. Header-only (tests/support/*.cpp are linked
// into every test executable). Needs VQ_BINARY_DIR (set by tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace test_support {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string read_file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `args` are appended to the binary's path in a shell command line (quote as in a shell).
inline CliResult run_cli(const std::string& args) {
  const std::string binary = std::string(VQ_BINARY_DIR) + "/veloxquant";
  if (!std::filesystem::exists(binary)) {
    ADD_FAILURE() << "the CLI is not built: build target veloxquant_cli (" << binary << ")";
    return {};
  }
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(std::rand());
  const std::string out = (dir / ("vq_cli_out_" + tag)).string(), err = (dir / ("vq_cli_err_" + tag)).string();
  const int status = std::system((binary + " " + args + " >" + out + " 2>" + err).c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file_text(out);
  r.err = read_file_text(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

}  // namespace test_support
