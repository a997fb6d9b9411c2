// bench-host --methods' list: entries split on ';', each a method with its own --bits, --set
// and --seed, re-written as a label; every syntax error names the entry by index and text.
#include "veloxquant/eval/method_list.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace veloxquant::eval {
namespace {

TEST(MethodList, SplitsEntriesWithTheirOwnOptions) {
  const auto entries = parse_method_list(
      " none;turboquant_rvq --bits 2 --set rvq_value_bits=4;  kivi   --bits 4 ;h2o --set h2o_budget=512 --seed 7");
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].method, "none");
  EXPECT_EQ(entries[0].label, "none");
  EXPECT_TRUE(entries[0].bits.empty());
  EXPECT_EQ(entries[1].method, "turboquant_rvq");
  EXPECT_EQ(entries[1].bits, "2");
  EXPECT_EQ(entries[1].sets, (std::vector<std::string>{"rvq_value_bits=4"}));
  EXPECT_EQ(entries[1].label, "turboquant_rvq --bits 2 --set rvq_value_bits=4");
  EXPECT_EQ(entries[2].label, "kivi --bits 4");  // whitespace normalised
  EXPECT_EQ(entries[3].method, "h2o");
  ASSERT_TRUE(entries[3].seed.has_value());
  EXPECT_EQ(*entries[3].seed, 7);
  EXPECT_EQ(entries[3].label, "h2o --set h2o_budget=512 --seed 7");
  // A per-layer bit list and several --set stay as given, in order.
  const auto list = parse_method_list("kivi --bits 2,3,4,4,4 --set kivi_group_size=32 --set kivi_residual_length=64");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].bits, "2,3,4,4,4");
  EXPECT_EQ(list[0].sets, (std::vector<std::string>{"kivi_group_size=32", "kivi_residual_length=64"}));
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_method_list(text);
    ADD_FAILURE() << "accepted '" << text << "', expected an error naming '" << needle << "'";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MethodList, ErrorsNameTheEntry) {
  expect_error("", "--methods is empty");
  expect_error("   ", "--methods is empty");
  expect_error("none;kivi --bitz 4", "--methods entry 2 ('kivi --bitz 4'): unknown flag '--bitz'");
  expect_error("none;;kivi", "--methods entry 2 (''): is empty");
  expect_error("none;kivi;", "--methods entry 3 (''): is empty");
  expect_error("kivi --bits", "--methods entry 1 ('kivi --bits'): --bits needs a value");
  expect_error("kivi --bits --set a=1", "--bits needs a value");
  expect_error("kivi --bits 2 --bits 4", "--bits given twice");
  expect_error("none; h2o --set h2o_budget", "--methods entry 2 ('h2o --set h2o_budget'): --set needs FIELD=VALUE");
  expect_error("h2o --set =3", "--set needs FIELD=VALUE, got '=3'");
  expect_error("kivi --seed x1", "--seed must be an integer, got 'x1'");
  expect_error("kivi --seed 12x", "--seed must be an integer, got '12x'");
  expect_error("kivi --seed 1 --seed 2", "--seed given twice");
  expect_error("--bits 4", "starts with the flag '--bits'");
  expect_error("kivi --bits 4; kivi  --bits 4", "--methods entry 2 ('kivi  --bits 4'): repeats entry 1");
  // The syntax reminder travels with every entry error.
  expect_error("kivi extra", "an entry is METHOD or --preset P, then [--bits B]");
}

}  // namespace
}  // namespace veloxquant::eval

namespace veloxquant::eval {
namespace {
TEST(MethodList, PresetEntries) {
  const std::vector<MethodEntry> entries = parse_method_list("none; --preset q4; --preset q3 --set sink_rows=1");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[1].preset, "q4");
  EXPECT_EQ(entries[1].method, "");
  EXPECT_EQ(entries[1].label, "--preset q4");
  EXPECT_EQ(entries[2].label, "--preset q3 --set sink_rows=1");
  EXPECT_THROW(parse_method_list("none; --preset"), std::invalid_argument);
}
}  // namespace
}  // namespace veloxquant::eval
