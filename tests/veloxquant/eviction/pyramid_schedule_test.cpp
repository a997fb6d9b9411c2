// PyramidKV's per-layer budget schedule (spec §4.3) against hand-computed tables, the .5 ties
// rounded half to even as Python's round does.
#include <gtest/gtest.h>

#include <numeric>

#include "veloxquant/errors.h"
#include "veloxquant/eviction/pyramid_schedule.h"

namespace veloxquant::eviction {
namespace {

TEST(PyramidSchedule, RoundHalfEvenAsPython) {
  EXPECT_EQ(round_half_even(0.5), 0);
  EXPECT_EQ(round_half_even(1.5), 2);
  EXPECT_EQ(round_half_even(2.5), 2);
  EXPECT_EQ(round_half_even(765.5), 766);
  EXPECT_EQ(round_half_even(258.5), 258);
  EXPECT_EQ(round_half_even(2.4999), 2);
  EXPECT_EQ(round_half_even(2.5001), 3);
}

TEST(PyramidSchedule, DefaultsOverFiveLayers) {
  // floor 5, span (512 - 5)(2 - 1) = 507: taper 1019, 765.5, 512, 258.5, 5 — the sum is already
  // 5 * 512 and the last layer sits on the floor; 765.5 -> 766 and 258.5 -> 258 (ties to even).
  EXPECT_EQ(pyramid_budgets(512, 4, 2.0, 5), (std::vector<int>{1019, 766, 512, 258, 5}));
}

TEST(PyramidSchedule, TiesInATwoLayerModel) {
  // floor 5, span (10 - 5)(0.5) = 2.5: 12.5 -> 12, 7.5 -> 8.
  EXPECT_EQ(pyramid_budgets(10, 4, 1.5, 2), (std::vector<int>{12, 8}));
}

TEST(PyramidSchedule, WaterFillingMovesTheExcess) {
  // floor 5, span 5 * 2 = 10: taper 20, 10, 0; the last layer is raised to 5 (excess 5), taken
  // from the others in proportion to their slack 15 : 5 -> 16.25, 8.75, 5 -> 16, 9, 5.
  const std::vector<int> b = pyramid_budgets(10, 4, 3.0, 3);
  EXPECT_EQ(b, (std::vector<int>{16, 9, 5}));
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 30);
  // Steeper: floor 3, span (8 - 3)(4 - 1) = 15: 23, 15.5, 8, 0.5, -7 -> raise 2 layers (excess
  // 2.5 + 10 = 12.5), slack 20 + 12.5 + 5 = 37.5: 23 - 20/3 = 16.333, 15.5 - 12.5/3 = 11.333,
  // 8 - 5/3 = 6.333 -> 16, 11, 6, 3, 3.
  EXPECT_EQ(pyramid_budgets(8, 2, 4.0, 5), (std::vector<int>{16, 11, 6, 3, 3}));
}

TEST(PyramidSchedule, SpecialCases) {
  EXPECT_EQ(pyramid_budgets(3, 4, 2.0, 1), (std::vector<int>{5}));  // one layer: max(avg, floor)
  EXPECT_EQ(pyramid_budgets(64, 4, 2.0, 1), (std::vector<int>{64}));
  EXPECT_EQ(pyramid_budgets(64, 4, 1.0, 4), (std::vector<int>(4, 64)));  // beta 1 is flat (= H2O)
}

TEST(PyramidSchedule, BetaBelowOneIsRefused) {
  try {
    pyramid_budgets(64, 4, 0.5, 4);
    FAIL() << "no error";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pyramid_beta"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("0.5"), std::string::npos);
  }
}

}  // namespace
}  // namespace veloxquant::eviction
