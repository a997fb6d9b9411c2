// MiniCache's per-token SLERP merge with retention (spec §4.3) against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "veloxquant/cross_layer/slerp_merge.h"

namespace veloxquant::cross_layer {
namespace {

TEST(SlerpMerge, OrthogonalDirections) {
  const float a[2] = {1, 0}, b[2] = {0, 1};
  float out[2];
  slerp_direction(a, b, 2, 0.5f, out);  // w = pi/2: sin(pi/4) each
  EXPECT_NEAR(out[0], 0.70710678f, 1e-6f);
  EXPECT_NEAR(out[1], 0.70710678f, 1e-6f);
  slerp_direction(a, b, 2, 0.25f, out);  // sin(3pi/8), sin(pi/8)
  EXPECT_NEAR(out[0], 0.92387953f, 1e-6f);
  EXPECT_NEAR(out[1], 0.38268343f, 1e-6f);
}

TEST(SlerpMerge, SixtyDegreesHalfWayIsThirty) {
  const float a[3] = {1, 0, 0}, b[3] = {0.5f, 0.8660254f, 0};
  float out[3];
  slerp_direction(a, b, 3, 0.5f, out);
  EXPECT_NEAR(out[0], 0.8660254f, 1e-6f);
  EXPECT_NEAR(out[1], 0.5f, 1e-6f);
  EXPECT_NEAR(out[2], 0.0f, 1e-7f);
}

TEST(SlerpMerge, NormalizedLerpWhenSinOmegaIsTiny) {
  // Antiparallel: w = pi, sin w ~ 1e-7 < 1e-6 -> (1 - t) a + t b, renormalized.
  const float a[2] = {1, 0}, b[2] = {-1, 0};
  float out[2];
  slerp_direction(a, b, 2, 0.25f, out);  // (0.5, 0) -> (1, 0)
  EXPECT_NEAR(out[0], 1.0f, 1e-6f);
  EXPECT_NEAR(out[1], 0.0f, 1e-6f);
  slerp_direction(a, b, 2, 0.5f, out);  // (0, 0): the 1e-8 floor keeps it 0, not NaN
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
}

TEST(SlerpMerge, MergeKeepsOwnMagnitudeAndRetainsDissimilarTokens) {
  const float primary[2] = {2, 0}, mine[2] = {0, 3};
  float out[2];
  // cos = 0 < 0.9: retained, the vector is kept as it is.
  EXPECT_TRUE(merge_token(primary, mine, 2, 0.9f, 0.5f, out));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 3.0f);
  // Threshold below every cosine: merged = 3 * (0.7071, 0.7071).
  EXPECT_FALSE(merge_token(primary, mine, 2, -1.5f, 0.5f, out));
  EXPECT_NEAR(out[0], 2.1213203f, 1e-5f);
  EXPECT_NEAR(out[1], 2.1213203f, 1e-5f);
  // Parallel (cos = 1 >= 0.9): the shared direction is the common one, magnitude 4.
  const float same_dir[2] = {0, 4}, other[2] = {0, 0.5f};
  EXPECT_FALSE(merge_token(other, same_dir, 2, 0.9f, 0.5f, out));
  EXPECT_NEAR(out[0], 0.0f, 1e-6f);
  EXPECT_NEAR(out[1], 4.0f, 1e-5f);
  // 60 degrees apart (cos 0.5), threshold 0.4: merged onto 30 degrees with magnitude 2.
  const float p60[2] = {5, 0}, m60[2] = {1, 1.7320508f};
  EXPECT_FALSE(merge_token(p60, m60, 2, 0.4f, 0.5f, out));
  EXPECT_NEAR(out[0], 1.7320508f, 1e-5f);
  EXPECT_NEAR(out[1], 1.0f, 1e-5f);
}

}  // namespace
}  // namespace veloxquant::cross_layer
