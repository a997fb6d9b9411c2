// The per-token rule's score update and victim search (eviction_policy.h kAttentionScored) on
// hand-built candidates whose keys are all zero: every logit is 0, so each of n live rows gets
// the weight 1/n exactly, and the scores, ties included, are known in advance. Past the budget
// the first minimum outside the sinks and the protected rows goes; a NaN score is taken only as
// the first candidate (no number compares below it, and it compares below nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "veloxquant/eviction/eviction_policy.h"

namespace veloxquant::eviction {
namespace {

// `carried` stored rows at positions 0.. and one new row, every key zero (d = 4).
Candidates zero_key_candidates(const std::vector<float>& carried) {
  Candidates c;
  c.stored = static_cast<int64_t>(carried.size());
  c.dim = 4;
  const int64_t n = c.stored + 1;
  c.keys.assign(static_cast<std::size_t>(n * c.dim), 0.0f);
  for (int32_t i = 0; i < n; ++i) c.positions.push_back(i);
  c.scores = carried;
  c.scores.push_back(0.0f);
  return c;
}

EvictionPolicy h2o(int64_t budget, int64_t n_sink, int64_t protect) {
  EvictionPolicy p;
  p.kind = EvictionPolicy::Kind::kAttentionScored;
  p.budget = budget;
  p.n_sink = n_sink;
  p.protect_recent = protect;
  return p;
}

std::vector<int32_t> select(const EvictionPolicy& p, Candidates& c) {
  const QuerySource proxy = [&c](int64_t token, std::vector<float>& out) -> int64_t {
    const float* key = c.keys.data() + (c.stored + token) * c.dim;
    out.assign(key, key + c.dim);
    return 1;
  };
  return select_rows(p, c, proxy, 0.5f);
}

TEST(VictimSearch, TiedScoresEvictTheEarliestOutsideTheSinks) {
  // Five live rows, weight 0.2 each: 0 (sink) 1.2, 1..3 tied at 1.2, the new row protected.
  Candidates c = zero_key_candidates({1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_EQ(select(h2o(4, 1, 1), c), (std::vector<int32_t>{0, 2, 3, 4}));
  // Without sinks the tie includes row 0, which goes.
  c = zero_key_candidates({1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_EQ(select(h2o(4, 0, 1), c), (std::vector<int32_t>{1, 2, 3, 4}));
  // A later, strictly lower score wins over the tie; a lower sink is never a victim.
  c = zero_key_candidates({0.0f, 1.0f, 1.0f, 0.5f});
  EXPECT_EQ(select(h2o(4, 1, 1), c), (std::vector<int32_t>{0, 1, 2, 4}));
  // Unprotected, the new row (score 0.2, its own weight) is the minimum.
  c = zero_key_candidates({1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_EQ(select(h2o(4, 1, 0), c), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(VictimSearch, SinksAnywhereAreSkipped) {
  // Positions out of order (the search takes its general path): the sink (position 0) is the
  // third candidate; rows 0, 1, 3 tie at 1.2, and the earliest non-sink goes.
  Candidates c = zero_key_candidates({1.0f, 1.0f, 0.0f, 1.0f});
  c.positions = {5, 6, 0, 7, 8};
  EXPECT_EQ(select(h2o(4, 1, 1), c), (std::vector<int32_t>{1, 2, 3, 4}));
  // The same candidates in position order (the contiguous path): the same rule.
  c = zero_key_candidates({0.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_EQ(select(h2o(4, 1, 1), c), (std::vector<int32_t>{0, 2, 3, 4}));
  // Sinks and protected rows fill the budget: a clear error, not a wrong row.
  c = zero_key_candidates({1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_THROW(select(h2o(4, 5, 0), c), std::logic_error);
}

TEST(VictimSearch, NaNScoreGoesOnlyAsTheFirstCandidate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Candidates c = zero_key_candidates({9.0f, nan, 1.0f, 0.5f});
  EXPECT_EQ(select(h2o(4, 1, 1), c), (std::vector<int32_t>{0, 2, 3, 4}));
  c = zero_key_candidates({9.0f, 1.0f, nan, 0.5f});
  EXPECT_EQ(select(h2o(4, 1, 1), c), (std::vector<int32_t>{0, 1, 2, 4}));
}

TEST(VictimSearch, EachRuleUpdatesTheScoresItsWay) {
  // Five live rows, weight 0.2f each; budget 5: nothing evicted, the scores are the rule's.
  const float w = 0.2f;
  EvictionPolicy p = h2o(5, 1, 0);
  p.decay = 0.5;
  Candidates c = zero_key_candidates({4.0f, 1.0f, 0.1f, 0.0f});
  ASSERT_EQ(select(p, c).size(), 5u);
  EXPECT_EQ(c.scores, (std::vector<float>{static_cast<float>(4.0 * 0.5 + w), static_cast<float>(1.0 * 0.5 + w),
                                          static_cast<float>(double(0.1f) * 0.5 + w), w, w}));
  p.accumulate = false;  // tova: the weight alone
  c = zero_key_candidates({4.0f, 1.0f, 0.1f, 0.0f});
  select(p, c);
  EXPECT_EQ(c.scores, (std::vector<float>{w, w, w, w, w}));
  p.accumulate = true;  // kvzip: the larger of the two
  p.max_combine = true;
  c = zero_key_candidates({4.0f, 1.0f, 0.1f, 0.0f});
  select(p, c);
  EXPECT_EQ(c.scores, (std::vector<float>{4.0f, 1.0f, w, w, w}));
}

}  // namespace
}  // namespace veloxquant::eviction
