#include "veloxquant/eviction/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "base/error.h"
#include "base/thread_pool.h"
#include "veloxquant/eviction/anchor_scores.h"
#include "veloxquant/eviction/attention_scores.h"
#include "veloxquant/eviction/first_minimum.h"
#include "veloxquant/eviction/leverage_scores.h"
#include "veloxquant/eviction/ordered_sums.h"
#include "veloxquant/eviction/recent_votes.h"

namespace veloxquant::eviction {
namespace {

using Kind = EvictionPolicy::Kind;

bool is_sink(const EvictionPolicy& p, const Candidates& c, int32_t candidate) {
  return c.positions[static_cast<std::size_t>(candidate)] < p.n_sink;
}

void keep_recent(const EvictionPolicy& p, const Candidates& c, std::vector<int32_t>& kept) {
  const int64_t n = c.count();
  kept.clear();
  if (n <= p.budget) {
    kept.resize(static_cast<std::size_t>(n));
    std::iota(kept.begin(), kept.end(), 0);
    return;
  }
  int64_t sinks = 0;
  for (int32_t i = 0; i < n; ++i) sinks += is_sink(p, c, i) ? 1 : 0;
  const int64_t first_recent = n - (p.budget - sinks);
  for (int32_t i = 0; i < n; ++i) {
    if (is_sink(p, c, i) || i >= first_recent) kept.push_back(i);
  }
}

// The squared norm of a key, summed as cam's cosine always summed it (one term at a time).
double squared_norm(const float* a, int64_t dim) {
  double aa = 0;
  for (int64_t i = 0; i < dim; ++i) aa += double(a[i]) * a[i];
  return aa;
}

// CaM: before live[victim] is dropped, blend its value (and key) into the live row whose key is
// most cosine-similar (the first such row), v_t <- (1 - a) v_t + a v_e with a = 1/2 (mean) or
// s / (1 + s), s = max(0, cosine) (sim_weighted) — a survivor that looks like the evicted token
// absorbs its contribution. The gate passes with probability min(1, victim score / target score)
// (the paper's attention ratio), drawn from (merge_seed, victim position).
// The cosine is <a, b> / sqrt(|a|^2 |b|^2) (0 when either is 0): `squares` holds every
// candidate's |k|^2 (computed once per call, updated when a merge moves a key) and the dot
// products of the victim with every live key run in SIMD, one key per lane, each summed in the
// scalar order (ordered_sums.h) — the same numbers, so the same survivor, as the plain loop.
void merge_into_survivor(const EvictionPolicy& p, Candidates& c, const std::vector<int32_t>& live, std::size_t victim,
                         std::vector<double>& squares, std::vector<double>& dots) {
  const std::size_t e = static_cast<std::size_t>(live[victim]);
  const float* victim_key = c.keys.data() + e * static_cast<std::size_t>(c.dim);
  dots.resize(live.size());
  indexed_row_dots(c.keys.data(), live.data(), static_cast<int64_t>(live.size()), c.dim, victim_key, dots.data());
  const double aa = squares[e];
  std::size_t target = 0;
  double best = -2.0;
  for (std::size_t j = 0; j < live.size(); ++j) {
    if (j == victim) continue;
    const double bb = squares[static_cast<std::size_t>(live[j])];
    const double s = aa > 0 && bb > 0 ? dots[j] / std::sqrt(aa * bb) : 0.0;
    if (s > best) {
      best = s;
      target = static_cast<std::size_t>(live[j]);
    }
  }
  if (best < -1.5) return;  // no survivor
  if (p.merge_gate) {
    const double ts = c.scores[target], es = c.scores[e];
    const double probability = ts > 0 ? std::min(1.0, es / ts) : 1.0;
    if (uniform_noise(p.merge_seed, c.positions[e]) >= probability) return;
  }
  const double s = std::max(0.0, best);
  const float a = static_cast<float>(p.merge == EvictionPolicy::Merge::kMean ? 0.5 : s / (1.0 + s));
  if (a == 0.0f) return;
  const auto blend = [a](float* into, const float* from, int64_t dim) {
    for (int64_t i = 0; i < dim; ++i) into[i] = (1.0f - a) * into[i] + a * from[i];
  };
  blend(c.values.data() + target * c.value_dim, c.values.data() + e * c.value_dim, c.value_dim);
  if (p.merge_keys) {
    float* target_key = c.keys.data() + target * c.dim;
    blend(target_key, victim_key, c.dim);
    squares[target] = squared_norm(target_key, c.dim);
  }
  c.modified[target] = 1;
}

// The per-token victim: the first minimum of the rank over live[0, end) outside the sinks;
// live.size() when every one of them is a sink. `step` is the position fed.
std::size_t first_min_rank(const EvictionPolicy& p, const Candidates& c, const std::vector<int32_t>& live,
                           std::size_t end, int64_t step) {
  std::size_t victim = live.size();
  float victim_rank = 0.0f;
  const auto consider = [&](std::size_t j, float r) {
    if (victim == live.size() || r < victim_rank) {
      victim = j;
      victim_rank = r;
    }
  };
  const float* scores = c.scores.data();
  const int32_t* positions = c.positions.data();
  if (p.kind != Kind::kLeverage && !p.has_noise()) {
    // The rank is the score: no call per row (h2o at 2,580 rows searches 2,580 rows a token).
    for (std::size_t j = 0; j < end; ++j) {
      const int32_t row = live[j];
      if (positions[row] >= p.n_sink) consider(j, scores[row]);
    }
    return victim;
  }
  for (std::size_t j = 0; j < end; ++j) {
    const int32_t row = live[j];
    if (positions[row] >= p.n_sink) consider(j, p.rank(scores[row], positions[row], step));
  }
  return victim;
}

// The H2O-scorer's step (spec §6) for new token t, the last of `live`: every live row's score
// combines with its weight, the new row starts at its own weight (see eviction_policy.h);
// kKeyNorm only gives the new row its fixed score.
void score_new_token(const EvictionPolicy& p, Candidates& c, const std::vector<int32_t>& live, int64_t t,
                     const QuerySource& queries, float scale, std::vector<float>& query, std::vector<float>& weights) {
  const int32_t idx = live.back();
  const float* key = c.keys.data() + static_cast<std::size_t>(idx) * static_cast<std::size_t>(c.dim);
  if (p.kind == EvictionPolicy::Kind::kDirection) return;  // scored by score_along_direction
  if (!p.uses_attention()) {
    c.scores[static_cast<std::size_t>(idx)] = p.arrival_score(key, c.dim, 0.0f);
    return;
  }
  const int64_t nq = queries(t, query);
  weights.resize(live.size());
  mean_softmax_weights(c.keys.data(), live.data(), static_cast<int64_t>(live.size()), c.dim, query.data(), nq, scale,
                       weights.data());
  p.update_scores_at(c.scores.data(), live.data(), weights.data(), static_cast<int64_t>(live.size()) - 1);
  c.scores[static_cast<std::size_t>(idx)] = p.arrival_score(key, c.dim, weights.back());
}

// CurDKV's step (eviction_policy.h kLeverage) for new token t, the last of `live`: the token's
// weights over the rows stored before it give their value leverage, added to their scores; the
// new row starts at its own leverage among them and itself (the very first token: 1).
// The two leverage problems (over the stored rows, and over them and the new row) do not depend
// on each other: they run as two tasks on the global pool (the cache scores curdkv's heads one
// after the other, so the pool is free; called from inside a pool task they run one after the
// other on that thread). Each task has its own weights and leverage buffers (the caller's).
void score_by_leverage(const EvictionPolicy& p, Candidates& c, const std::vector<int32_t>& live, int64_t t,
                       const QuerySource& queries, float scale, std::vector<float>& query,
                       std::vector<float> (&weights)[2], std::vector<float> (&leverage)[2]) {
  const std::size_t idx = static_cast<std::size_t>(live.back());
  if (live.size() == 1) {
    c.scores[idx] = 1.0f;
    return;
  }
  const int64_t nq = queries(t, query);
  const auto problem = [&](int64_t begin, int64_t end) {
    for (int64_t which = begin; which < end; ++which) {
      const std::size_t count = live.size() - 1 + static_cast<std::size_t>(which);
      std::vector<float>& w = weights[which];
      std::vector<float>& l = leverage[which];
      w.resize(count);
      l.resize(count);
      mean_softmax_weights(c.keys.data(), live.data(), static_cast<int64_t>(count), c.dim, query.data(), nq, scale,
                           w.data());
      if (which == 0) {
        value_leverage_scores(c.values.data(), live.data(), static_cast<int64_t>(count), c.value_dim, w.data(),
                              p.rank_cap, l.data());
      } else {
        l.back() = value_self_leverage(c.values.data(), live.data(), static_cast<int64_t>(count), c.value_dim, w.data(),
                                       p.rank_cap);
      }
    }
  };
  base::ThreadPool::global().parallel_for(2, problem);
  for (std::size_t j = 0; j + 1 < live.size(); ++j) c.scores[static_cast<std::size_t>(live[j])] += leverage[0][j];
  c.scores[idx] = leverage[1].back();
}

// The top right singular vector of the rows x dim matrix `keys` (the top eigenvector of K^T K)
// by power iteration from a fixed start, oriented so that the rows' mean projection is >= 0.
std::vector<float> principal_direction(const float* keys, int64_t rows, int64_t dim) {
  std::vector<double> gram(static_cast<std::size_t>(dim * dim), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* k = keys + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      for (int64_t j = 0; j < dim; ++j) gram[static_cast<std::size_t>(i * dim + j)] += double(k[i]) * k[j];
    }
  }
  std::vector<double> v(static_cast<std::size_t>(dim), 1.0 / std::sqrt(double(dim))), next(v.size());
  for (int iteration = 0; iteration < 200; ++iteration) {
    double norm = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < dim; ++j)
        sum += gram[static_cast<std::size_t>(i * dim + j)] * v[static_cast<std::size_t>(j)];
      next[static_cast<std::size_t>(i)] = sum;
      norm += sum * sum;
    }
    if (norm == 0.0) break;  // all-zero keys: keep the start
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < dim; ++i) v[static_cast<std::size_t>(i)] = next[static_cast<std::size_t>(i)] / norm;
  }
  double mean_projection = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) mean_projection += double(keys[r * dim + i]) * v[static_cast<std::size_t>(i)];
  }
  std::vector<float> u(static_cast<std::size_t>(dim));
  for (int64_t i = 0; i < dim; ++i)
    u[static_cast<std::size_t>(i)] =
        static_cast<float>(mean_projection < 0 ? -v[static_cast<std::size_t>(i)] : v[static_cast<std::size_t>(i)]);
  return u;
}

// Q-Filters' scores: calibrates the head's direction once the calibration window is in (the
// first tokens are candidates 0.. since nothing is evicted before), then scores every candidate
// by direction_sign * <k, u>. Before calibration nothing can be evicted (window <= budget + 1).
void score_along_direction(const EvictionPolicy& p, Candidates& c) {
  float* u = c.head_state;
  float& calibrated = c.head_state[c.dim];
  if (calibrated == 0.0f) {
    if (c.count() < p.calibration_window()) return;
    const std::vector<float> direction = principal_direction(c.keys.data(), p.calibration_window(), c.dim);
    std::copy(direction.begin(), direction.end(), u);
    calibrated = 1.0f;
  }
  for (int64_t j = 0; j < c.count(); ++j) {
    const float* k = c.keys.data() + j * c.dim;
    double dot = 0.0;
    for (int64_t i = 0; i < c.dim; ++i) dot += double(k[i]) * u[i];
    c.scores[static_cast<std::size_t>(j)] = static_cast<float>(p.direction_sign * dot);
  }
}

// ChunkKV's victim: the complete chunk (positions [c*i, c*(i+1)), all c members live, none a sink
// or among the first protected index `evictable_end`) with the lowest mean score; returns the
// index in `live` of its first member, or live.size() when no chunk qualifies. Whole chunks are
// the only thing ever evicted, so every chunk but the newest is complete.
std::size_t pick_chunk(const EvictionPolicy& p, const Candidates& c, const std::vector<int32_t>& live,
                       std::size_t evictable_end) {
  const int64_t size = p.chunk_size;
  std::size_t best = live.size();
  double best_mean = 0.0;
  for (std::size_t j = 0; j + static_cast<std::size_t>(size) <= evictable_end; ++j) {
    const int32_t first = c.positions[static_cast<std::size_t>(live[j])];
    if (first % size != 0 || first < p.n_sink) continue;
    const int32_t last = c.positions[static_cast<std::size_t>(live[j + static_cast<std::size_t>(size) - 1])];
    if (last != first + size - 1) continue;  // not all members live (the chunk is not complete)
    double sum = 0.0;
    for (int64_t m = 0; m < size; ++m) sum += c.scores[static_cast<std::size_t>(live[j + static_cast<std::size_t>(m)])];
    const double mean = sum / double(size);
    if (best == live.size() || mean < best_mean) {
      best = j;
      best_mean = mean;
    }
  }
  return best;
}

// The number of first candidates that are sinks when the sinks are exactly those (the rows are
// in position order, so they are); -1 when a later candidate is a sink too.
int64_t sink_prefix(const EvictionPolicy& p, const Candidates& c) {
  const int64_t n = c.count();
  int64_t k = 0;
  while (k < n && is_sink(p, c, static_cast<int32_t>(k))) ++k;
  for (int64_t i = k; i < n; ++i) {
    if (is_sink(p, c, static_cast<int32_t>(i))) return -1;
  }
  return k;
}

// keep_per_token for h2o, tova, pyramidkv and kvzip (kAttentionScored without cam's merge,
// chunkkv's chunks or keyformer's noise) when the sinks are the first `sinks` candidates: the rank
// is the score and nothing but the update and the victim search touches the scores, so they
// follow `live` in one contiguous array — the update (update_scores: updated_score's expressions)
// and the first minimum (first_minimum.h) run over it in SIMD — and are written back at the end.
// The sinks, never evicted, stay the first live rows. The same rows and scores as keep_per_token.
void keep_per_token_dense(const EvictionPolicy& p, Candidates& c, const QuerySource& queries, float scale,
                          int64_t sinks, std::vector<int32_t>& live) {
  live.resize(static_cast<std::size_t>(c.stored));
  std::iota(live.begin(), live.end(), 0);
  const std::size_t protect = static_cast<std::size_t>(p.effective_protect());
  thread_local std::vector<float> query, weights, scores;
  scores.assign(c.scores.begin(), c.scores.begin() + c.stored);
  for (int64_t t = 0; t < c.count() - c.stored; ++t) {
    live.push_back(static_cast<int32_t>(c.stored + t));
    const std::size_t n = live.size();
    const int64_t nq = queries(t, query);
    weights.resize(n);
    mean_softmax_weights(c.keys.data(), live.data(), static_cast<int64_t>(n), c.dim, query.data(), nq, scale,
                         weights.data());
    p.update_scores(scores.data(), weights.data(), static_cast<int64_t>(n) - 1, scores.data());
    scores.push_back(weights.back());  // the new row's own weight (arrival_score)
    if (static_cast<int64_t>(n) <= p.budget) continue;
    const std::size_t first = static_cast<std::size_t>(std::min(sinks, c.stored + t + 1));  // the live sinks
    const std::size_t end = n - protect;
    if (end <= first) throw std::logic_error("eviction: no evictable row (sinks and protected rows fill the budget)");
    const std::size_t victim =
        first + static_cast<std::size_t>(first_minimum(scores.data() + first, static_cast<int64_t>(end - first)));
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    scores.erase(scores.begin() + static_cast<std::ptrdiff_t>(victim));
  }
  for (std::size_t j = 0; j < live.size(); ++j) c.scores[static_cast<std::size_t>(live[j])] = scores[j];
}

// The per-token policies, one new token at a time: score, then past the budget evict the first
// minimum of the rank outside the sinks and the newest `protect` rows (cam merges it first).
void keep_per_token(const EvictionPolicy& p, Candidates& c, const QuerySource& queries, float scale,
                    std::vector<int32_t>& live) {
  if (p.kind == Kind::kAttentionScored && !p.merges() && p.chunk_size == 1 && !p.has_noise()) {
    if (const int64_t sinks = sink_prefix(p, c); sinks >= 0)
      return keep_per_token_dense(p, c, queries, scale, sinks, live);
  }
  live.resize(static_cast<std::size_t>(c.stored));
  std::iota(live.begin(), live.end(), 0);
  const int64_t protect = p.effective_protect();
  // Reused by this thread: no allocation per decode step.
  thread_local std::vector<float> query, weights, pair_weights[2], pair_leverage[2];
  thread_local std::vector<double> squares, dots;
  thread_local RecentVotes votes;
  if (p.kind == EvictionPolicy::Kind::kRecentVotes) votes.reset(p.obs_window);
  if (p.merges()) {
    squares.resize(static_cast<std::size_t>(c.count()));
    for (int64_t j = 0; j < c.count(); ++j)
      squares[static_cast<std::size_t>(j)] = squared_norm(c.keys.data() + j * c.dim, c.dim);
  }
  for (int64_t t = 0; t < c.count() - c.stored; ++t) {
    live.push_back(static_cast<int32_t>(c.stored + t));
    if (p.kind == EvictionPolicy::Kind::kRecentVotes) {
      // A merge that moved a key (merge_keys) changes the logits the voters keep.
      if (p.merges() && p.merge_keys) votes.reset(p.obs_window);
      votes.vote(c, live.data(), static_cast<int64_t>(live.size()), queries, scale);
    } else if (p.kind == EvictionPolicy::Kind::kLeverage) {
      score_by_leverage(p, c, live, t, queries, scale, query, pair_weights, pair_leverage);
    } else {
      score_new_token(p, c, live, t, queries, scale, query, weights);
    }
    if (static_cast<int64_t>(live.size()) <= p.budget) continue;
    const std::size_t evictable_end = live.size() - static_cast<std::size_t>(protect);
    if (p.chunk_size > 1) {
      const std::size_t first = pick_chunk(p, c, live, evictable_end);
      if (first == live.size()) throw std::logic_error("eviction: no complete chunk outside the sinks to evict");
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(first),
                 live.begin() + static_cast<std::ptrdiff_t>(first + static_cast<std::size_t>(p.chunk_size)));
      continue;
    }
    const std::size_t victim =
        first_min_rank(p, c, live, evictable_end, c.positions[static_cast<std::size_t>(live.back())]);
    if (victim == live.size())
      throw std::logic_error("eviction: no evictable row (sinks and protected rows fill the budget)");
    if (p.merges()) merge_into_survivor(p, c, live, victim, squares, dots);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
  }
}

// SnapKV's prefill vote: the last obs_window tokens of the chunk attend (causally) over every
// candidate; votes are summed over the window and average-pooled over neighbouring rows. They
// replace the carried scores: as in the paper, the newest observation window decides (carrying
// votes over chunks let rows voted for by many early chunks crowd out every later one: SmolLM2,
// 16-token chunks, budget 128, KL 0.357 carried). The sinks and the window are kept, the
// best-voted rest fills the budget.
void keep_observation_window(const EvictionPolicy& p, Candidates& c, const QuerySource& queries, float scale,
                             std::vector<int32_t>& kept) {
  const int64_t n = c.count(), fresh = n - c.stored;
  const int64_t window = std::min(p.obs_window, fresh);
  thread_local std::vector<double> votes;
  thread_local std::vector<float> query, weights;
  votes.resize(static_cast<std::size_t>(n));
  std::fill(votes.begin(), votes.end(), 0.0);
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
  kept.clear();
  if (n <= p.budget) {
    kept.resize(static_cast<std::size_t>(n));
    std::iota(kept.begin(), kept.end(), 0);
    return;
  }
  const int64_t protect_from = n - std::min(window, p.effective_protect());
  thread_local std::vector<char> keep;
  keep.resize(static_cast<std::size_t>(n));
  std::fill(keep.begin(), keep.end(), 0);
  int64_t taken = 0;
  thread_local std::vector<int32_t> rest;
  rest.clear();
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
  for (std::size_t i = 0; i < rest.size() && taken < p.budget; ++i, ++taken)
    keep[static_cast<std::size_t>(rest[i])] = 1;
  for (int32_t j = 0; j < n; ++j) {
    if (keep[static_cast<std::size_t>(j)]) kept.push_back(j);
  }
}

// NestedKV's selection (eviction_policy.h kAnchors): every candidate scored afresh by its key's
// anchors; the sinks and the best scores (the earlier of equals) fill the budget. The rows
// dropped are the worst under (score, then the later row) — a selection, not a sort of every
// row (a decode step drops one); a NaN score ranks below every number.
void keep_by_anchors(const EvictionPolicy& p, Candidates& c, std::vector<int32_t>& kept) {
  const int64_t n = c.count();
  const AnchorParams params{p.anchor_window, p.anchor_beta, p.anchor_tau, p.anchor_kappa};
  nested_anchor_scores(c.keys.data(), nullptr, n, c.dim, params, c.scores.data());
  thread_local std::vector<int32_t> rest;
  thread_local std::vector<char> dropped;
  kept.clear();
  rest.clear();
  for (int32_t j = 0; j < n; ++j) (n <= p.budget || is_sink(p, c, j) ? kept : rest).push_back(j);
  if (n <= p.budget) return;
  const std::size_t keep_rest = static_cast<std::size_t>(p.budget) - kept.size();
  const auto better = [&](int32_t a, int32_t b) {
    const float sa = c.scores[static_cast<std::size_t>(a)], sb = c.scores[static_cast<std::size_t>(b)];
    const float ka = std::isnan(sa) ? -INFINITY : sa, kb = std::isnan(sb) ? -INFINITY : sb;
    if (ka != kb) return ka > kb;
    if (std::isnan(sa) != std::isnan(sb)) return !std::isnan(sa);
    return a < b;
  };
  dropped.resize(static_cast<std::size_t>(n));
  std::fill(dropped.begin(), dropped.end(), 0);
  if (rest.size() == keep_rest + 1) {
    // One row over (a decode step): the worst, in one pass.
    dropped[static_cast<std::size_t>(
        *std::min_element(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return better(b, a); }))] = 1;
  } else {
    std::nth_element(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(keep_rest), rest.end(), better);
    for (std::size_t i = keep_rest; i < rest.size(); ++i) dropped[static_cast<std::size_t>(rest[i])] = 1;
  }
  kept.clear();
  for (int32_t j = 0; j < n; ++j) {
    if (!dropped[static_cast<std::size_t>(j)]) kept.push_back(j);
  }
}

}  // namespace

std::vector<int32_t> shrink_rows(const EvictionPolicy& p, const Candidates& c) {
  const int64_t n = c.count();
  std::vector<int32_t> kept(static_cast<std::size_t>(n));
  std::iota(kept.begin(), kept.end(), 0);
  if (n <= p.budget) return kept;
  const int64_t step = c.positions.back();
  std::vector<int32_t> evictable;
  for (int32_t j = 0; j < n - p.effective_protect(); ++j) {
    if (!is_sink(p, c, j)) evictable.push_back(j);
  }
  const std::size_t excess = static_cast<std::size_t>(n - p.budget);
  if (excess > evictable.size()) throw std::logic_error("eviction: sinks and protected rows exceed the new budget");
  const auto rank_of = [&](int32_t j) {
    return p.rank(c.scores[static_cast<std::size_t>(j)], c.positions[static_cast<std::size_t>(j)], step);
  };
  std::stable_sort(evictable.begin(), evictable.end(), [&](int32_t a, int32_t b) { return rank_of(a) < rank_of(b); });
  std::vector<char> dropped(static_cast<std::size_t>(n), 0);
  for (std::size_t i = 0; i < excess; ++i) dropped[static_cast<std::size_t>(evictable[i])] = 1;
  kept.clear();
  for (int32_t j = 0; j < n; ++j) {
    if (!dropped[static_cast<std::size_t>(j)]) kept.push_back(j);
  }
  return kept;
}

int64_t EvictionPolicy::effective_protect() const {
  return std::max<int64_t>(0, std::min(protect_recent, budget - n_sink - 1));
}

float EvictionPolicy::updated_score(float carried, float weight) const {
  float out = 0.0f;
  with_score_rule([&](auto combine) { out = combine(carried, weight); });
  return out;
}

// update_scores and update_scores_at apply updated_score's rule (with_score_rule, the one copy),
// so the decode step's, the dense per-token path's and the general selection's scores are equal
// bit for bit.
void EvictionPolicy::update_scores(const float* carried, const float* weights, int64_t n, float* out) const {
  with_score_rule([&](auto combine) {
    for (int64_t j = 0; j < n; ++j) out[j] = combine(carried[j], weights[j]);
  });
}

void EvictionPolicy::update_scores_at(float* scores, const int32_t* rows, const float* weights, int64_t n) const {
  with_score_rule([&](auto combine) {
    for (int64_t j = 0; j < n; ++j) scores[rows[j]] = combine(scores[rows[j]], weights[j]);
  });
}

float EvictionPolicy::arrival_score(const float* key, int64_t dim, float own_weight) const {
  if (kind != Kind::kKeyNorm) return own_weight;
  double squares = 0.0;
  for (int64_t i = 0; i < dim; ++i) squares += double(key[i]) * key[i];
  return static_cast<float>(key_norm_sign * std::sqrt(squares));
}

float EvictionPolicy::rank(float score, int32_t position, int64_t step) const {
  if (kind == Kind::kLeverage) return static_cast<float>(double(score) / double(1 + step - position));
  if (!has_noise()) return score;
  const double progress = noise_anneal_steps > 0 ? std::min(1.0, double(step) / double(noise_anneal_steps)) : 1.0;
  const double tau = noise_tau_init + (noise_tau_end - noise_tau_init) * progress;
  return static_cast<float>(score + tau * gumbel_noise(noise_seed, position));
}

double uniform_noise(uint64_t seed, int32_t position) {
  // splitmix64 of (seed, position): frozen per position, independent of call sizes and order.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(static_cast<uint32_t>(position)) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double(z >> 11) + 0.5) * 0x1.0p-53;
}

float gumbel_noise(uint64_t seed, int32_t position) {
  return static_cast<float>(-std::log(-std::log(uniform_noise(seed, position))));
}

const char* merge_name(EvictionPolicy::Merge merge) {
  switch (merge) {
    case EvictionPolicy::Merge::kNone:
      return "drop";
    case EvictionPolicy::Merge::kSimWeighted:
      return "sim_weighted";
    case EvictionPolicy::Merge::kMean:
      return "mean";
  }
  return "drop";
}

EvictionPolicy::Merge parse_merge(const std::string& name) {
  if (name == "drop") return EvictionPolicy::Merge::kNone;
  if (name == "sim_weighted") return EvictionPolicy::Merge::kSimWeighted;
  if (name == "mean") return EvictionPolicy::Merge::kMean;
  throw base::FormatError("eviction merge '" + name + "' is unknown");
}

const char* policy_kind_name(EvictionPolicy::Kind kind) {
  switch (kind) {
    case Kind::kRecentWindow:
      return "recent_window";
    case Kind::kAttentionScored:
      return "attention_scored";
    case Kind::kObservationWindow:
      return "observation_window";
    case Kind::kKeyNorm:
      return "key_norm";
    case Kind::kRecentVotes:
      return "recent_votes";
    case Kind::kDirection:
      return "direction";
    case Kind::kLeverage:
      return "leverage";
    case Kind::kAnchors:
      return "anchors";
  }
  return "attention_scored";
}

EvictionPolicy::Kind parse_policy_kind(const std::string& name) {
  if (name == "recent_window") return Kind::kRecentWindow;
  if (name == "attention_scored") return Kind::kAttentionScored;
  if (name == "observation_window") return Kind::kObservationWindow;
  if (name == "key_norm") return Kind::kKeyNorm;
  if (name == "recent_votes") return Kind::kRecentVotes;
  if (name == "direction") return Kind::kDirection;
  if (name == "leverage") return Kind::kLeverage;
  if (name == "anchors") return Kind::kAnchors;
  throw base::FormatError("eviction policy '" + name + "' is unknown");
}

void select_rows(const EvictionPolicy& policy, Candidates& c, const QuerySource& queries, float scale,
                 std::vector<int32_t>& kept) {
  switch (policy.kind) {
    case Kind::kRecentWindow:
      return keep_recent(policy, c, kept);
    case Kind::kAttentionScored:
    case Kind::kKeyNorm:
    case Kind::kRecentVotes:
    case Kind::kLeverage:
      return keep_per_token(policy, c, queries, scale, kept);
    case Kind::kAnchors:
      return keep_by_anchors(policy, c, kept);
    case Kind::kDirection:
      score_along_direction(policy, c);
      return keep_per_token(policy, c, queries, scale, kept);
    case Kind::kObservationWindow:
      if (c.count() - c.stored == 1) return keep_per_token(policy, c, queries, scale, kept);
      return keep_observation_window(policy, c, queries, scale, kept);
  }
  keep_recent(policy, c, kept);
}

std::vector<int32_t> select_rows(const EvictionPolicy& policy, Candidates& c, const QuerySource& queries, float scale) {
  std::vector<int32_t> kept;
  select_rows(policy, c, queries, scale, kept);
  return kept;
}

}  // namespace veloxquant::eviction
