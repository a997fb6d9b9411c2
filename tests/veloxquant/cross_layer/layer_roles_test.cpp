// Cross-layer role assignment (spec §4.3, §11.6: the role formulas reproduced exactly), against
// tables written out by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "veloxquant/cross_layer/layer_roles.h"

namespace veloxquant::cross_layer {
namespace {

// "A2" = anchor/primary of group 2 with its reader count, "r2" = follower of group 2.
std::string render(const std::vector<LayerRole>& roles) {
  std::string out;
  for (const LayerRole& r : roles) {
    if (!out.empty()) out += ' ';
    out += r.leader ? "A" + std::to_string(r.group_id) + ":" + std::to_string(r.n_readers)
                    : "r" + std::to_string(r.group_id);
  }
  return out;
}

TEST(XQuantRoles, ContiguousGroupsWithATrailingAnchorOnlyGroup) {
  EXPECT_EQ(render(xquant_roles(1, 2)), "A0:0");
  EXPECT_EQ(render(xquant_roles(4, 2)), "A0:1 r0 A1:1 r1");
  EXPECT_EQ(render(xquant_roles(5, 2)), "A0:1 r0 A1:1 r1 A2:0");  // stories260K: layer 4 alone
  EXPECT_EQ(render(xquant_roles(7, 3)), "A0:2 r0 r0 A1:2 r1 r1 A2:0");
  EXPECT_EQ(render(xquant_roles(8, 3)), "A0:2 r0 r0 A1:2 r1 r1 A2:1 r2");
  EXPECT_EQ(render(xquant_roles(0, 2)), "");
  const std::vector<LayerRole> smol = xquant_roles(30, 2);  // SmolLM2-135M: 15 pairs
  for (std::size_t k = 0; k < smol.size(); ++k) {
    EXPECT_EQ(smol[k].leader, k % 2 == 0);
    EXPECT_EQ(smol[k].group_id, static_cast<int>(k / 2));
  }
}

TEST(MiniCacheRoles, LayersBelowStartStandAloneThenGroups) {
  // start = int(5 * 0.5) = 2: layers 0 and 1 alone; (2, 3) merge; 4 a primary with no partner.
  EXPECT_EQ(render(minicache_roles(5, 0.5, 2)), "A0:0 A1:0 A2:1 r2 A3:0");
  EXPECT_EQ(render(minicache_roles(4, 0.5, 2)), "A0:0 A1:0 A2:1 r2");
  EXPECT_EQ(render(minicache_roles(4, 0.0, 2)), "A0:1 r0 A1:1 r1");
  EXPECT_EQ(render(minicache_roles(4, 1.0, 2)), "A0:0 A1:0 A2:0 A3:0");           // start = n: nothing merges
  EXPECT_EQ(render(minicache_roles(7, 0.3, 3)), "A0:0 A1:0 A2:2 r2 r2 A3:1 r3");  // int(2.1) = 2
  EXPECT_EQ(render(minicache_roles(1, 0.5, 2)), "A0:0");                          // int(0.5) = 0
}

TEST(MiniCacheRoles, StartTruncatesLikePythonInt) {
  // 100 * 0.29 = 28.999999999999996 in doubles: Python's int() gives 28, not 29.
  const std::vector<LayerRole> roles = minicache_roles(100, 0.29, 2);
  EXPECT_EQ(roles[27].n_readers, 0);
  EXPECT_TRUE(roles[28].leader);
  EXPECT_EQ(roles[28].n_readers, 1);
  EXPECT_FALSE(roles[29].leader);
  EXPECT_EQ(roles[29].group_id, 28);
  // 10 * 0.7 = 7.000000000000001: int() = 7.
  EXPECT_EQ(render(minicache_roles(10, 0.7, 2)), "A0:0 A1:0 A2:0 A3:0 A4:0 A5:0 A6:0 A7:1 r7 A8:0");
  // SmolLM2-135M: 30 layers, start 15, groups (15,16) ... (29) alone.
  const std::vector<LayerRole> smol = minicache_roles(30, 0.5, 2);
  EXPECT_EQ(smol[14].n_readers, 0);
  EXPECT_EQ(smol[15].n_readers, 1);
  EXPECT_FALSE(smol[28].leader);
  EXPECT_TRUE(smol[29].leader);
  EXPECT_EQ(smol[29].n_readers, 0);
}

}  // namespace
}  // namespace veloxquant::cross_layer
