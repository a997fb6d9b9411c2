// The bit allocator's solver (allocators/bit_allocation.h) against an independent brute force
// that enumerates every combination, on random small tables; and its refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "base/error.h"
#include "veloxquant/allocators/bit_allocation.h"

namespace veloxquant::allocators {
namespace {

struct Best {
  double loss = std::numeric_limits<double>::infinity();
  int64_t cost = 0;
};

// Every combination of choices, kept when within budget and of lower loss (or equal loss and
// lower cost).
Best brute_force(const std::vector<AllocationItem>& items, int64_t budget) {
  Best best;
  std::vector<std::size_t> pick(items.size(), 0);
  while (true) {
    int64_t cost = 0;
    double loss = 0.0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      cost += items[i].choices[pick[i]].cost;
      loss += items[i].choices[pick[i]].loss;
    }
    if (cost <= budget && (loss < best.loss - 1e-12 || (std::abs(loss - best.loss) <= 1e-12 && cost < best.cost))) {
      best = {loss, cost};
    }
    std::size_t i = 0;
    while (i < items.size() && ++pick[i] == items[i].choices.size()) pick[i++] = 0;
    if (i == items.size()) break;
  }
  return best;
}

TEST(BitAllocation, MatchesBruteForceOnRandomTables) {
  std::mt19937_64 rng(12);
  int solved = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n_items = 1 + static_cast<int>(rng() % 5);
    std::vector<AllocationItem> items(static_cast<std::size_t>(n_items));
    int64_t cheapest = 0, dearest = 0;
    for (int i = 0; i < n_items; ++i) {
      const int n_choices = 1 + static_cast<int>(rng() % 4);
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
      for (int c = 0; c < n_choices; ++c) {
        // Costs share a factor (as bytes of whole rows do) half of the time.
        const int64_t cost = static_cast<int64_t>(rng() % 12) * (trial % 2 ? 6 : 1);
        const double loss = std::uniform_real_distribution<double>(-0.5, 2.0)(rng);
        items[static_cast<std::size_t>(i)].choices.push_back({c + 1, cost, loss});
        lo = std::min(lo, cost);
        hi = std::max(hi, cost);
      }
      cheapest += lo;
      dearest += hi;
    }
    const int64_t budget = cheapest + static_cast<int64_t>(rng() % static_cast<uint64_t>(dearest - cheapest + 1));
    const Best want = brute_force(items, budget);
    const Allocation got = solve_bit_allocation(items, budget);
    ASSERT_EQ(got.choice.size(), items.size());
    double loss = 0.0;
    int64_t cost = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      ASSERT_LT(got.choice[i], items[i].choices.size());
      loss += items[i].choices[got.choice[i]].loss;
      cost += items[i].choices[got.choice[i]].cost;
    }
    EXPECT_LE(cost, budget) << "trial " << trial;
    EXPECT_NEAR(got.loss, loss, 1e-9) << "trial " << trial;
    EXPECT_EQ(got.cost, cost) << "trial " << trial;
    EXPECT_NEAR(got.loss, want.loss, 1e-9) << "trial " << trial;
    EXPECT_EQ(got.cost, want.cost) << "trial " << trial;  // ties go to the cheaper total
    ++solved;
  }
  EXPECT_EQ(solved, 400);
}

TEST(BitAllocation, SpendsTheBudgetWhereTheLossFallsMost) {
  // Two layers; one extra bit fits. Layer 1 gains 0.05 from it, layer 0 only 0.01.
  const std::vector<AllocationItem> items = {
      {"layer 0 keys", {{3, 0, 0.02}, {4, 24, 0.01}}},
      {"layer 1 keys", {{3, 0, 0.08}, {4, 24, 0.03}}},
  };
  const Allocation a = solve_bit_allocation(items, 30);
  EXPECT_EQ(a.choice, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(a.cost, 24);
  EXPECT_NEAR(a.loss, 0.05, 1e-12);
}

TEST(BitAllocation, RefusesWhatCannotBeSolved) {
  auto message = [](const std::vector<AllocationItem>& items, int64_t budget) {
    try {
      solve_bit_allocation(items, budget);
    } catch (const base::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}, 10).find("no items"), std::string::npos);
  EXPECT_NE(message({{"layer 0 keys", {}}}, 10).find("'layer 0 keys' has no choice"), std::string::npos);
  const std::string over = message({{"a", {{2, 8, 0.1}}}, {"b", {{2, 8, 0.1}, {3, 16, 0.0}}}}, 15);
  EXPECT_NE(over.find("take 16 bytes per token, above the budget of 15"), std::string::npos) << over;
  EXPECT_NE(message({{"a", {{2, -1, 0.1}}}}, 10).find("negative cost"), std::string::npos);
  EXPECT_NE(message({{"a", {{2, 1, std::nan("")}}}}, 10).find("non-finite loss"), std::string::npos);
  EXPECT_NE(message({{"a", {{2, 1, 0.0}, {3, int64_t{1} << 40, 0.0}}}}, int64_t{1} << 40).find("at most 2^26"),
            std::string::npos);
  // A budget far above every choice's cost is fine (the table stops at the dearest total).
  EXPECT_EQ(solve_bit_allocation({{"a", {{2, 1, 0.5}, {3, 7, 0.1}}}}, int64_t{1} << 40).cost, 7);
}

}  // namespace
}  // namespace veloxquant::allocators
