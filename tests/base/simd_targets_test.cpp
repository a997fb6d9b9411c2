// test_support::for_each_simd_target (tests/support/simd_targets.h): every kernel test trusts it
// to visit each target that is compiled in and supported once, with the dispatch pinned to that
// target, to pass the target's id to a body that asks for it, and to restore the normal dispatch.
#include "support/simd_targets.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

// The targets a full pass must visit, read bit by bit from HWY_TARGETS and the CPU's set, best
// first (Highway numbers better targets with lower bits).
std::vector<int64_t> compiled_and_supported() {
  const int64_t both = hwy::SupportedTargets() & HWY_TARGETS;
  std::vector<int64_t> out;
  for (int bit = 0; bit < 63; ++bit) {
    if ((both >> bit) & 1) out.push_back(int64_t{1} << bit);
  }
  return out;
}

TEST(SimdTargets, TheNameBodyRunsOnEveryTargetOnceWithTheDispatchPinnedToIt) {
  const std::vector<int64_t> want = compiled_and_supported();
  ASSERT_FALSE(want.empty());
  const int64_t normal = hwy::SupportedTargets();
  std::vector<std::string> names;
  std::vector<int64_t> pinned;
  test_support::for_each_simd_target([&](const char* target) {
    names.emplace_back(target);
    pinned.push_back(hwy::SupportedTargets());
  });
  ASSERT_EQ(names.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(names[i], hwy::TargetName(want[i])) << "visit " << i;
    EXPECT_EQ(pinned[i], want[i]) << names[i] << ": the dispatch may pick only this target";
  }
  EXPECT_EQ(hwy::SupportedTargets(), normal) << "the normal dispatch is back";
}

TEST(SimdTargets, ABodyThatTakesTheIdGetsTheIdOfTheNamedTarget) {
  const std::vector<int64_t> want = compiled_and_supported();
  const int64_t normal = hwy::SupportedTargets();
  std::vector<int64_t> ids;
  test_support::for_each_simd_target([&](const char* target, int64_t id) {
    EXPECT_STREQ(target, hwy::TargetName(id));
    EXPECT_EQ(hwy::SupportedTargets(), id);
    ids.push_back(id);
  });
  EXPECT_EQ(ids, want);
  EXPECT_EQ(hwy::SupportedTargets(), normal);
}

}  // namespace
