// Method coverage: which of the original's methods the registry serves, and that the README
// states the registry's real counts. The original's names are written out here from the
// research spec (../shared/research/original-spec.md section 6, rows 1-43, plus comm_vq of its
// newest snapshot), not read from the registry, so a method that drops out of the registry, or a
// README count that drifts from it, fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "veloxquant/registry/method_registry.h"

namespace veloxquant {
namespace {

const std::set<std::string>& original_method_names() {
  static const std::set<std::string> names = {"turboquant_prod",
                                              "turboquant_mse",
                                              "turboquant_rvq",
                                              "polar",
                                              "qjl",
                                              "vecinfer",
                                              "spectral",
                                              "kivi",
                                              "kivi_sink",
                                              "svdq",
                                              "kitty",
                                              "adakv",
                                              "xquant",
                                              "kvquant",
                                              "palu",
                                              "cachegen",
                                              "minicache",
                                              "gear",
                                              "zipcache",
                                              "snapkv",
                                              "streaming_llm",
                                              "h2o",
                                              "tova",
                                              "pyramidkv",
                                              "squeeze",
                                              "chunkkv",
                                              "cam",
                                              "xkv",
                                              "nsnquant",
                                              "knorm",
                                              "skvq",
                                              "qfilters",
                                              "keyformer",
                                              "morphkv",
                                              "kvzip",
                                              "kvtc",
                                              "curdkv",
                                              "nestedkv",
                                              "amc",
                                              "a2ats",
                                              "anchorkv",
                                              "rocketkv",
                                              "age_tiered",
                                              "comm_vq"};
  return names;
}

// The original's methods not registered yet, each with the open issue that adds it. Empty once
// every one has landed; a name here that the registry already serves fails the test below.
const std::set<std::string>& not_yet_registered() {
  static const std::set<std::string> names = {};
  return names;
}

std::set<std::string> registered_names() {
  std::set<std::string> out;
  for (const MethodDescriptor& m : method_registry()) out.insert(m.name);
  return out;
}

TEST(MethodCoverage, TheSpecListsFortyFourOriginalMethods) { EXPECT_EQ(original_method_names().size(), 44u); }

TEST(MethodCoverage, EveryOriginalMethodIsRegisteredOrListedAsPending) {
  const std::set<std::string> registered = registered_names();
  for (const std::string& name : original_method_names()) {
    const bool pending = not_yet_registered().count(name) > 0;
    EXPECT_NE(registered.count(name) > 0, pending) << name
                                                   << (pending ? " is registered: remove it from not_yet_registered()"
                                                               : " is an original method the registry does not serve");
  }
  for (const std::string& name : not_yet_registered()) {
    EXPECT_TRUE(original_method_names().count(name)) << name;
  }
}

// The README says how many methods `veloxquant methods` lists and how many of the original's
// 44 are among them; both numbers must be the registry's.
TEST(MethodCoverage, ReadmeStatesTheRegistrysCounts) {
  std::ifstream in(std::filesystem::path(VQ_SOURCE_DIR) / "README.md");
  ASSERT_TRUE(in) << "README.md not found under " << VQ_SOURCE_DIR;
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  std::smatch m;
  const std::regex sentence(R"(lists all (\d+) methods \((\d+) of the original's 44)");
  ASSERT_TRUE(std::regex_search(readme, m, sentence))
      << "README.md no longer has the sentence \"lists all N methods (M of the original's 44\"";
  const std::set<std::string> registered = registered_names();
  int64_t original_registered = 0;
  for (const std::string& name : original_method_names()) original_registered += registered.count(name);
  EXPECT_EQ(std::stoll(m[1].str()), static_cast<long long>(registered.size()));
  EXPECT_EQ(std::stoll(m[2].str()), original_registered);
}

}  // namespace
}  // namespace veloxquant
