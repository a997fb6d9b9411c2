// MorphKV's vote with each voter's logits kept (eviction/recent_votes.h) against the vote
// recomputed from scratch with mean_softmax_weights at every token, bit for bit: real queries
// for the call's new tokens (a GQA group of 3), the key-as-query for stored voters, rows
// evicted between tokens (the voters' visible rows shrink), windows of 1 (TOVA) to 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "veloxquant/eviction/attention_scores.h"
#include "veloxquant/eviction/recent_votes.h"

namespace veloxquant::eviction {
namespace {

// The vote as the policy computed it before the logits were kept: every voter's softmax afresh.
void vote_from_scratch(const Candidates& c, const std::vector<int32_t>& live, int64_t window,
                       const QuerySource& queries, float scale, std::vector<float>& scores) {
  for (int32_t row : live) scores[static_cast<std::size_t>(row)] = 0.0f;
  std::vector<float> query, weights;
  const std::size_t voters = std::min<std::size_t>(live.size(), static_cast<std::size_t>(window));
  for (std::size_t v = live.size() - voters; v < live.size(); ++v) {
    const int32_t voter = live[v];
    int64_t nq = 1;
    if (voter >= c.stored) {
      nq = queries(voter - c.stored, query);
    } else {
      query.assign(c.keys.begin() + voter * c.dim, c.keys.begin() + (voter + 1) * c.dim);
    }
    weights.resize(v + 1);
    mean_softmax_weights(c.keys.data(), live.data(), static_cast<int64_t>(v + 1), c.dim, query.data(), nq, scale,
                         weights.data());
    for (std::size_t j = 0; j <= v; ++j) scores[static_cast<std::size_t>(live[j])] += weights[j];
  }
}

TEST(RecentVotes, EqualTheVoteRecomputedEveryTokenBitForBit) {
  constexpr int64_t kDim = 64, kGroup = 3, kStored = 40, kNew = 90, kBudget = 48;
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Candidates c;
  c.stored = kStored;
  c.dim = kDim;
  c.keys.resize(static_cast<std::size_t>((kStored + kNew) * kDim));
  for (float& k : c.keys) k = normal(rng);
  c.positions.resize(static_cast<std::size_t>(kStored + kNew));
  std::iota(c.positions.begin(), c.positions.end(), 0);
  std::vector<float> real(static_cast<std::size_t>(kNew * kGroup * kDim));
  for (float& q : real) q = 2.0f * normal(rng);
  const QuerySource queries = [&](int64_t token, std::vector<float>& out) -> int64_t {
    out.assign(real.begin() + token * kGroup * kDim, real.begin() + (token + 1) * kGroup * kDim);
    return kGroup;
  };
  const float scale = 1.0f / std::sqrt(float(kDim));
  for (const int64_t window : {1, 2, 8}) {
    SCOPED_TRACE("window " + std::to_string(window));
    RecentVotes votes;
    votes.reset(window);
    c.scores.assign(c.positions.size(), 0.0f);
    std::vector<float> want(c.positions.size(), 0.0f);
    std::vector<int32_t> live(static_cast<std::size_t>(kStored));
    std::iota(live.begin(), live.end(), 0);
    std::mt19937 evict(static_cast<uint32_t>(window));
    for (int64_t t = 0; t < kNew; ++t) {
      live.push_back(static_cast<int32_t>(kStored + t));
      votes.vote(c, live.data(), static_cast<int64_t>(live.size()), queries, scale);
      vote_from_scratch(c, live, window, queries, scale, want);
      for (int32_t row : live) {
        ASSERT_EQ(c.scores[static_cast<std::size_t>(row)], want[static_cast<std::size_t>(row)])
            << "token " << t << " row " << row;
      }
      // Evict a random row older than the newest window - 1 (as the policy protects them).
      if (static_cast<int64_t>(live.size()) > kBudget) {
        const std::size_t evictable = live.size() - static_cast<std::size_t>(window - 1);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(evict() % evictable));
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::eviction
