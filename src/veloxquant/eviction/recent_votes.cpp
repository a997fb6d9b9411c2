#include "veloxquant/eviction/recent_votes.h"

#include <algorithm>
#include <cmath>

#include "lm/kernels/simd_dot.h"

namespace veloxquant::eviction {

void RecentVotes::reset(int64_t window) {
  window_ = std::max<int64_t>(1, window);
  if (static_cast<int64_t>(voters_.size()) < window_) voters_.resize(static_cast<std::size_t>(window_));
  for (Voter& v : voters_) v.row = -1;
}

RecentVotes::Voter& RecentVotes::voter_for(const Candidates& c, const int32_t* live, int64_t position,
                                           const QuerySource& queries, float scale) {
  const int32_t row = live[position];
  Voter& v = voters_[static_cast<std::size_t>(row % window_)];
  if (v.row == row) return v;
  // A new voter: its query (or queries), then its logits over the live rows up to itself, as
  // mean_softmax_weights computes them.
  int64_t nq = 1;
  if (row >= c.stored) {
    nq = queries(row - c.stored, query_);
  } else {
    const float* key = c.keys.data() + static_cast<std::size_t>(row) * static_cast<std::size_t>(c.dim);
    query_.assign(key, key + c.dim);
  }
  v.row = row;
  v.queries = nq;
  v.stride = static_cast<int64_t>(row) + 1;
  if (v.logits.size() < static_cast<std::size_t>(nq * v.stride))
    v.logits.resize(static_cast<std::size_t>(nq * v.stride));
  for (int64_t q = 0; q < nq; ++q) {
    const float* query = query_.data() + q * c.dim;
    float* out = v.logits.data() + q * v.stride;
    for (int64_t j = 0; j <= position; ++j) {
      const float* k = c.keys.data() + static_cast<int64_t>(live[j]) * c.dim;
      out[live[j]] = lm::kernels::simd::dot_f32(k, query, c.dim) * scale;
    }
  }
  return v;
}

void RecentVotes::vote(Candidates& c, const int32_t* live, int64_t count, const QuerySource& queries, float scale) {
  for (int64_t j = 0; j < count; ++j) c.scores[static_cast<std::size_t>(live[j])] = 0.0f;
  const int64_t voters = std::min(count, window_);
  for (int64_t position = count - voters; position < count; ++position) {
    const Voter& v = voter_for(c, live, position, queries, scale);
    const int64_t visible = position + 1;  // causal: the live rows up to the voter
    weights_.resize(static_cast<std::size_t>(visible));
    gathered_.resize(static_cast<std::size_t>(visible));
    std::fill(weights_.begin(), weights_.end(), 0.0f);
    for (int64_t q = 0; q < v.queries; ++q) {
      // mean_softmax_weights's steps on the live rows' logits: the running maximum, the shifted
      // exponentials and their sum, then the weights scaled into the mean.
      const float* logits = v.logits.data() + q * v.stride;
      float* x = gathered_.data();
      for (int64_t j = 0; j < visible; ++j) x[j] = logits[live[j]];
      // The maximum over eight running maxima (one chain of maxima waited four cycles a row).
      // Which zero wins a tie of +0 and -0 may differ from one chain's, but x - mx, and so
      // every exponential, is the same for either.
      float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
      int64_t j = 0;
      for (; j + 8 <= visible; j += 8) {
        for (int l = 0; l < 8; ++l) m[l] = std::max(m[l], x[j + l]);
      }
      for (; j < visible; ++j) m[0] = std::max(m[0], x[j]);
      float mx = m[0];
      for (int l = 1; l < 8; ++l) mx = std::max(mx, m[l]);
      const float total = lm::kernels::simd::exp_shifted_sum(gathered_.data(), visible, mx);
      lm::kernels::simd::axpy_f32(1.0f / (total * static_cast<float>(v.queries)), gathered_.data(), weights_.data(),
                                  visible);
    }
    for (int64_t j = 0; j < visible; ++j)
      c.scores[static_cast<std::size_t>(live[j])] += weights_[static_cast<std::size_t>(j)];
  }
}

}  // namespace veloxquant::eviction
