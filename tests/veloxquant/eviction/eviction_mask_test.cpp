// The positional mask against hand-written tables (spec §2.3): key visible iff
// key_pos <= query_pos and, with a window, query_pos < key_pos + window.
#include <gtest/gtest.h>

#include "base/error.h"
#include "veloxquant/eviction/eviction_mask.h"

namespace veloxquant::eviction {
namespace {

std::vector<std::vector<int>> table(const lm::AttentionMask& m) {
  std::vector<std::vector<int>> rows;
  for (int64_t i = 0; i < m.explicit_mask.dim(2); ++i) {
    rows.emplace_back();
    for (int64_t j = 0; j < m.explicit_mask.dim(3); ++j) rows.back().push_back(int(m.explicit_mask.get({0, 0, i, j})));
  }
  return rows;
}

TEST(EvictionMask, ByTruePositions) {
  // Kept rows at 0, 1, 5, 9, then this call's rows 10, 11 (queries at 10, 11).
  const std::vector<std::vector<int64_t>> keys = {{0, 1, 5, 9, 10, 11}};
  const lm::AttentionMask m = positional_mask(keys, 10, 2, std::nullopt);
  EXPECT_EQ(m.kind, lm::AttentionMask::Kind::kExplicit);
  EXPECT_EQ(m.explicit_mask.shape(), (lm::Shape{1, 1, 2, 6}));
  EXPECT_EQ(table(m), (std::vector<std::vector<int>>{{1, 1, 1, 1, 1, 0}, {1, 1, 1, 1, 1, 1}}));
  // Window 4: query 10 sees positions 7..10, query 11 sees 8..11.
  EXPECT_EQ(table(positional_mask(keys, 10, 2, 4)),
            (std::vector<std::vector<int>>{{0, 0, 0, 1, 1, 0}, {0, 0, 0, 1, 1, 1}}));
}

TEST(EvictionMask, OneMaskPerBatchElement) {
  const lm::AttentionMask m = positional_mask({{0, 3, 4}, {0, 2, 4}}, 4, 1, 2);
  EXPECT_EQ(m.explicit_mask.shape(), (lm::Shape{2, 1, 1, 3}));
  EXPECT_EQ(m.explicit_mask.get({0, 0, 0, 1}), 1.0f);  // 3 is within 2 of 4
  EXPECT_EQ(m.explicit_mask.get({1, 0, 0, 1}), 0.0f);  // 2 is not
  EXPECT_THROW(positional_mask({{0, 1}, {0}}, 2, 1, std::nullopt), base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant::eviction
