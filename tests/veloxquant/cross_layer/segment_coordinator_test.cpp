// The shared coordinator (spec §4.3, issues #79/#80 of the original): reclaim on the last
// read, live-token budget, missing segments, reset.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "veloxquant/cross_layer/segment_coordinator.h"

namespace veloxquant::cross_layer {
namespace {

using Coordinator = SegmentCoordinator<std::string>;
// The original raises RuntimeError (spec §3.4 "Runtime errors").
static_assert(std::is_base_of_v<std::runtime_error, CrossLayerCapacityError>);

TEST(SegmentCoordinator, LastReaderReclaimsTheSegment) {
  Coordinator c(100, "xquant_max_ctx");
  c.publish(0, 0, 40, 2, std::make_shared<const std::string>("prefill"));
  c.publish(1, 0, 40, 1, std::make_shared<const std::string>("other group"));
  EXPECT_EQ(c.live_tokens(0), 40);
  EXPECT_EQ(c.live_segments(), 2u);
  const auto first = c.fetch(0, 0);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, "prefill");
  EXPECT_EQ(c.live_tokens(0), 40);  // one reader left
  const auto second = c.fetch(0, 0);
  EXPECT_EQ(second.get(), first.get());
  EXPECT_EQ(c.live_tokens(0), 0);  // deleted, tokens credited back
  EXPECT_EQ(c.live_segments(), 1u);
  EXPECT_EQ(c.fetch(0, 0), nullptr);  // gone: the caller handles a missing segment
  EXPECT_EQ(*first, "prefill");       // a reader may keep the payload
  EXPECT_TRUE(c.fetch(1, 0));
  EXPECT_EQ(c.live_segments(), 0u);
  EXPECT_EQ(c.live_tokens(1), 0);
}

TEST(SegmentCoordinator, NoReadersPublishesNothingAndMissingIsNull) {
  Coordinator c(10, "xquant_max_ctx");
  c.publish(3, 0, 1000, 0, std::make_shared<const std::string>("never read"));  // would exceed max_ctx too
  EXPECT_EQ(c.live_segments(), 0u);
  EXPECT_EQ(c.live_tokens(3), 0);
  EXPECT_EQ(c.fetch(3, 0), nullptr);
  EXPECT_EQ(c.fetch(0, 17), nullptr);
}

TEST(SegmentCoordinator, MaxCtxCountsLiveTokensAndNamesTheOption) {
  Coordinator c(10, "minicache_max_ctx");
  c.publish(0, 0, 6, 1, std::make_shared<const std::string>("a"));
  try {
    c.publish(0, 6, 5, 1, std::make_shared<const std::string>("b"));
    FAIL() << "11 live tokens > max_ctx 10 must throw";
  } catch (const CrossLayerCapacityError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Increase minicache_max_ctx"), std::string::npos) << what;
    EXPECT_NE(what.find("11"), std::string::npos) << what;
  }
  c.publish(1, 0, 10, 1, std::make_shared<const std::string>("c"));  // another group has its own count
  c.fetch(0, 0);                                                     // reclaimed: room again
  c.publish(0, 6, 10, 1, std::make_shared<const std::string>("d"));
  EXPECT_EQ(c.live_tokens(0), 10);
  c.reset();
  EXPECT_EQ(c.live_segments(), 0u);
  EXPECT_EQ(c.live_tokens(0), 0);
  EXPECT_EQ(c.fetch(1, 0), nullptr);
}

TEST(SegmentCoordinator, RepublishingAKeyReplacesIt) {
  Coordinator c(10, "xquant_max_ctx");
  c.publish(0, 0, 8, 1, std::make_shared<const std::string>("old"));
  c.publish(0, 0, 8, 1, std::make_shared<const std::string>("new"));  // after a trim: not 16 live
  EXPECT_EQ(c.live_tokens(0), 8);
  EXPECT_EQ(*c.fetch(0, 0), "new");
  EXPECT_EQ(c.live_tokens(0), 0);
}

}  // namespace
}  // namespace veloxquant::cross_layer
