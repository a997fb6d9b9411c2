#pragma once
// MorphKV's per-token vote (eviction_policy.h kRecentVotes) with each voter's logits kept while
// it votes. At every token the newest `window` live rows attend causally over the live rows;
// the same voter votes at `window` consecutive tokens, and between them the rows it sees only
// lose members (rows after it never become visible to it, rows before it are only evicted). So
// its logits scale * <k_j, q> are computed once, when it starts voting, and each later vote
// softmaxes the logits of the rows still live. The weights equal mean_softmax_weights's bit for
// bit: the same dot products, the same maximum, the same exp_shifted_sum and axpy over the
// live rows' logits in temporal order (tests/veloxquant/eviction/recent_votes_test.cpp).
// Recomputing every voter's dot products at every token made morphkv's prefill 0.51x the
// native cache's at 4k.
#include <cstdint>
#include <vector>

#include "veloxquant/eviction/eviction_policy.h"

namespace veloxquant::eviction {

class RecentVotes {
 public:
  // Forgets every voter (a new call, or a new head: candidate indices start over); `window`
  // voters vote at each token.
  void reset(int64_t window);
  // c.scores[live[j]] for every live row (count of them, candidate indices in temporal order):
  // 0, plus the mean softmax weight it gets from each of the newest `window` live rows, each
  // voter attending over the live rows up to itself. A voter that is a new token of the call
  // (index >= c.stored) uses `queries`; an earlier, stored row its key (the key-as-query).
  void vote(Candidates& c, const int32_t* live, int64_t count, const QuerySource& queries, float scale);

 private:
  struct Voter {
    int32_t row = -1;           // candidate index (-1: empty slot)
    int64_t queries = 0;        // query vectors (the GQA group, or 1)
    int64_t stride = 0;         // logits per query: candidate indices 0..row
    std::vector<float> logits;  // queries x stride; only the entries of rows live when computed
  };
  Voter& voter_for(const Candidates& c, const int32_t* live, int64_t position, const QuerySource& queries, float scale);

  int64_t window_ = 1;
  std::vector<Voter> voters_;  // slot row % window (the voters are consecutive rows)
  std::vector<float> query_, gathered_, weights_;
};

}  // namespace veloxquant::eviction
