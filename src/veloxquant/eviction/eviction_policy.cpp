#include "veloxquant/eviction/eviction_policy.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "base/error.h"
#include "veloxquant/eviction/attention_scores.h"

namespace veloxquant::eviction {
namespace {

using Kind = EvictionPolicy::Kind;

bool is_sink(const EvictionPolicy& p, const Candidates& c, int32_t candidate) {
  return c.positions[static_cast<std::size_t>(candidate)] < p.n_sink;
}

std::vector<int32_t> keep_recent(const EvictionPolicy& p, const Candidates& c) {
  const int64_t n = c.count();
  std::vector<int32_t> kept;
  if (n <= p.budget) {
    kept.resize(static_cast<std::size_t>(n));
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  int64_t sinks = 0;
  for (int32_t i = 0; i < n; ++i) sinks += is_sink(p, c, i) ? 1 : 0;
  const int64_t first_recent = n - (p.budget - sinks);
  for (int32_t i = 0; i < n; ++i) {
    if (is_sink(p, c, i) || i >= first_recent) kept.push_back(i);
  }
  return kept;
}

// The H2O-scorer, one new token at a time (spec §6), with the new token scored by its own
// weight (see eviction_policy.h).
std::vector<int32_t> keep_scored_per_token(const EvictionPolicy& p, Candidates& c, const QuerySource& queries,
                                           float scale) {
  std::vector<int32_t> live(static_cast<std::size_t>(c.stored));
  std::iota(live.begin(), live.end(), 0);
  const int64_t protect = p.effective_protect();
  std::vector<float> query, weights;
  for (int64_t t = 0; t < c.count() - c.stored; ++t) {
    const int32_t idx = static_cast<int32_t>(c.stored + t);
    live.push_back(idx);
    const int64_t nq = queries(t, query);
    weights.resize(live.size());
    mean_softmax_weights(c.keys.data(), live.data(), static_cast<int64_t>(live.size()), c.dim, query.data(), nq, scale,
                         weights.data());
    for (std::size_t j = 0; j + 1 < live.size(); ++j) {
      float& s = c.scores[static_cast<std::size_t>(live[j])];
      s = p.accumulate ? static_cast<float>(s * p.decay + weights[j]) : weights[j];
    }
    c.scores[static_cast<std::size_t>(idx)] = weights.back();
    if (static_cast<int64_t>(live.size()) <= p.budget) continue;
    const std::size_t evictable_end = live.size() - static_cast<std::size_t>(protect);
    std::size_t victim = live.size();
    for (std::size_t j = 0; j < evictable_end; ++j) {
      if (is_sink(p, c, live[j])) continue;
      if (victim == live.size() ||
          c.scores[static_cast<std::size_t>(live[j])] < c.scores[static_cast<std::size_t>(live[victim])]) {
        victim = j;
      }
    }
    if (victim == live.size()) throw std::logic_error("eviction: no evictable row (sinks and protected rows fill the budget)");
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
  }
  return live;
}

// SnapKV's prefill vote: the last obs_window tokens of the chunk attend (causally) over every
// candidate; votes are summed over the window and average-pooled over neighbouring rows. They
// replace the carried scores: as in the paper, the newest observation window decides (carrying
// votes over chunks let rows voted for by many early chunks crowd out every later one: SmolLM2,
// 16-token chunks, budget 128, KL 0.357 carried). The sinks and the window are kept, the
// best-voted rest fills the budget.
std::vector<int32_t> keep_observation_window(const EvictionPolicy& p, Candidates& c, const QuerySource& queries,
                                             float scale) {
  const int64_t n = c.count(), fresh = n - c.stored;
  const int64_t window = std::min(p.obs_window, fresh);
  std::vector<double> votes(static_cast<std::size_t>(n), 0.0);
  std::vector<float> query, weights;
  for (int64_t t = fresh - window; t < fresh; ++t) {
    const int64_t visible = c.stored + t + 1;  // causal: every stored row and new rows up to t
    const int64_t nq = queries(t, query);
    weights.resize(static_cast<std::size_t>(visible));
    mean_softmax_weights(c.keys.data(), nullptr, visible, c.dim, query.data(), nq, scale, weights.data());
    for (int64_t j = 0; j < visible; ++j) votes[static_cast<std::size_t>(j)] += weights[static_cast<std::size_t>(j)];
  }
  const int64_t half = p.pool_kernel / 2;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t lo = std::max<int64_t>(0, j - half), hi = std::min<int64_t>(n - 1, j + half);
    double sum = 0.0;
    for (int64_t i = lo; i <= hi; ++i) sum += votes[static_cast<std::size_t>(i)];
    c.scores[static_cast<std::size_t>(j)] = static_cast<float>(sum / double(hi - lo + 1));
  }
  std::vector<int32_t> kept;
  if (n <= p.budget) {
    kept.resize(static_cast<std::size_t>(n));
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  const int64_t protect_from = n - std::min(window, p.effective_protect());
  std::vector<char> keep(static_cast<std::size_t>(n), 0);
  int64_t taken = 0;
  std::vector<int32_t> rest;
  for (int32_t j = 0; j < n; ++j) {
    if (is_sink(p, c, j) || j >= protect_from) {
      keep[static_cast<std::size_t>(j)] = 1;
      ++taken;
    } else {
      rest.push_back(j);
    }
  }
  // Best votes first; equal votes keep the earlier row (stable).
  std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) {
    return c.scores[static_cast<std::size_t>(a)] > c.scores[static_cast<std::size_t>(b)];
  });
  for (std::size_t i = 0; i < rest.size() && taken < p.budget; ++i, ++taken) keep[static_cast<std::size_t>(rest[i])] = 1;
  for (int32_t j = 0; j < n; ++j) {
    if (keep[static_cast<std::size_t>(j)]) kept.push_back(j);
  }
  return kept;
}

}  // namespace

int64_t EvictionPolicy::effective_protect() const {
  return std::max<int64_t>(0, std::min(protect_recent, budget - n_sink - 1));
}

const char* policy_kind_name(EvictionPolicy::Kind kind) {
  switch (kind) {
    case Kind::kRecentWindow: return "recent_window";
    case Kind::kAttentionScored: return "attention_scored";
    case Kind::kObservationWindow: return "observation_window";
  }
  return "attention_scored";
}

EvictionPolicy::Kind parse_policy_kind(const std::string& name) {
  if (name == "recent_window") return Kind::kRecentWindow;
  if (name == "attention_scored") return Kind::kAttentionScored;
  if (name == "observation_window") return Kind::kObservationWindow;
  throw base::FormatError("eviction policy '" + name + "' is unknown");
}

std::vector<int32_t> select_rows(const EvictionPolicy& policy, Candidates& c, const QuerySource& queries, float scale) {
  switch (policy.kind) {
    case Kind::kRecentWindow: return keep_recent(policy, c);
    case Kind::kAttentionScored: return keep_scored_per_token(policy, c, queries, scale);
    case Kind::kObservationWindow:
      if (c.count() - c.stored == 1) return keep_scored_per_token(policy, c, queries, scale);
      return keep_observation_window(policy, c, queries, scale);
  }
  return keep_recent(policy, c);
}

}  // namespace veloxquant::eviction
