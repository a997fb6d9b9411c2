#pragma once
// Brute force of the per-token attention-scored eviction rule (spec §6 "H2O-scorer"), written
// independently of the library in doubles: the new token's key is the query (the key-as-query
// proxy) against every live row and itself; each live row's score combines with its weight by
// the method's rule, the new row starts at its own weight; over budget the row with the lowest
// rank (the score, or the score plus keyformer's noise) outside the sinks and the newest
// `protect` rows is evicted (the first such minimum), after `before_evict` (cam's merge) saw it.
// h2o, tova, pyramidkv, keyformer, kvzip and cam are this loop with different rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "support/kv_test_data.h"
#include "veloxquant/eviction/eviction_test_config.h"

namespace veloxquant::eviction_test {

struct RefRow {
  int64_t pos;
  std::vector<float> key;
  float score;
  std::vector<float> value;  // what the cache must hold as the row's value (the key, unless merged)
};

struct RefRule {
  int64_t budget = 0, n_sink = 0, protect = 0;
  std::function<float(float carried, float weight)> combine;
  // What victims are ranked by at the step feeding position `step`.
  std::function<float(const RefRow& row, int64_t step)> rank = [](const RefRow& row, int64_t) { return row.score; };
  std::function<void(std::vector<RefRow>& rows, std::size_t victim)> before_evict;
  // chunkkv: evict the whole chunk of positions [c*i, c*(i+1)) — all present, none a sink, none
  // among the newest `protect` — with the lowest mean score instead of one row.
  int64_t chunk = 1;
};

// The chunk ChunkKV evicts from `rows`: the index of its first member (rows.size(): none).
inline std::size_t ref_chunk_victim(const std::vector<RefRow>& rows, const RefRule& rule) {
  std::size_t best = rows.size();
  double best_mean = 0;
  const std::size_t end = rows.size() - static_cast<std::size_t>(rule.protect);
  for (std::size_t j = 0; j + static_cast<std::size_t>(rule.chunk) <= end; ++j) {
    if (rows[j].pos % rule.chunk != 0 || rows[j].pos < rule.n_sink) continue;
    bool complete = true;
    double sum = 0;
    for (int64_t m = 0; m < rule.chunk; ++m) {
      complete = complete && rows[j + static_cast<std::size_t>(m)].pos == rows[j].pos + m;
      sum += rows[j + static_cast<std::size_t>(m)].score;
    }
    if (complete && (best == rows.size() || sum / double(rule.chunk) < best_mean)) {
      best = j;
      best_mean = sum / double(rule.chunk);
    }
  }
  return best;
}

inline RefRule h2o_rule(int64_t budget, int64_t n_sink, int64_t protect, double decay, bool accumulate) {
  RefRule rule;
  rule.budget = budget;
  rule.n_sink = n_sink;
  rule.protect = protect;
  rule.combine = [decay, accumulate](float carried, float w) {
    return accumulate ? static_cast<float>(carried * decay + w) : w;
  };
  return rule;
}

inline void ref_step(std::vector<RefRow>& rows, RefRow incoming, const RefRule& rule) {
  rows.push_back(std::move(incoming));
  const std::vector<float>& q = rows.back().key;
  const float scale = 1.0f / std::sqrt(static_cast<float>(q.size()));
  std::vector<double> e(rows.size());
  double mx = -INFINITY, total = 0;
  for (std::size_t j = 0; j < rows.size(); ++j) {
    double dot = 0;
    for (std::size_t c = 0; c < q.size(); ++c) dot += double(rows[j].key[c]) * q[c];
    e[j] = dot * scale;
    mx = std::max(mx, e[j]);
  }
  for (double& x : e) total += (x = std::exp(x - mx));
  for (std::size_t j = 0; j < rows.size(); ++j) {
    const float w = static_cast<float>(e[j] / total);
    rows[j].score = j + 1 == rows.size() ? w : rule.combine(rows[j].score, w);
  }
  if (static_cast<int64_t>(rows.size()) <= rule.budget) return;
  if (rule.chunk > 1) {
    const std::size_t first = ref_chunk_victim(rows, rule);
    ASSERT_LT(first, rows.size()) << "no complete chunk to evict";
    rows.erase(rows.begin() + static_cast<std::ptrdiff_t>(first),
               rows.begin() + static_cast<std::ptrdiff_t>(first + static_cast<std::size_t>(rule.chunk)));
    return;
  }
  const int64_t step = rows.back().pos;
  std::size_t victim = rows.size();
  for (std::size_t j = 0; j + static_cast<std::size_t>(rule.protect) < rows.size(); ++j) {
    if (rows[j].pos < rule.n_sink) continue;
    if (victim == rows.size() || rule.rank(rows[j], step) < rule.rank(rows[victim], step)) victim = j;
  }
  if (rule.before_evict) rule.before_evict(rows, victim);
  rows.erase(rows.begin() + static_cast<std::ptrdiff_t>(victim));
}

// Feeds 120 single tokens (proxy scoring) to the method of `c` and to the reference, comparing
// kept positions, scores and values after every token, per head. Keys are uniform in [-4, 4) times
// `key_scale`: at full scale a token's weight on itself is ~1, which is fine for sums but leaves a
// max-combined score (kvzip) a near-tie among many rows, decided by f32 rounding.
inline void expect_matches_reference(KVCacheConfig c, const RefRule& rule, float key_scale = 1.0f) {
  constexpr int64_t kHeads = 2, kDim = 16;
  c.head_dim = kDim;
  c.eviction.eviction_scoring = "proxy";
  auto cache = make_eviction_cache(c);
  std::vector<std::vector<RefRow>> ref(kHeads);
  for (int64_t t = 0; t < 120; ++t) {
    std::vector<float> kf = test_support::random_kv(1, kHeads, 1, kDim, 1000 + t, lm::DType::F32).to_f32();
    for (float& x : kf) x *= key_scale;
    const lm::Tensor k = lm::Tensor::from_f32(kf, {1, kHeads, 1, kDim}, lm::DType::F32);
    cache->update_and_fetch(k, k);
    for (int64_t h = 0; h < kHeads; ++h) {
      const std::vector<float> key(kf.begin() + h * kDim, kf.begin() + (h + 1) * kDim);
      ref_step(ref[h], {t, key, 0.0f, key}, rule);
      std::vector<int32_t> want;
      for (const RefRow& r : ref[h]) want.push_back(static_cast<int32_t>(r.pos));
      const int32_t* got = cache->rows().positions(0, h);
      ASSERT_EQ(std::vector<int32_t>(got, got + cache->rows().rows()), want) << "token " << t << " head " << h;
      // Scores are computed in f32 (SIMD dot products and exponentials), the reference in double.
      for (std::size_t j = 0; j < ref[h].size(); ++j) {
        EXPECT_NEAR(cache->rows().scores(0, h)[j], ref[h][j].score, 2e-6f * (1.0f + std::fabs(ref[h][j].score)));
      }
      std::vector<float> values(static_cast<std::size_t>(cache->rows().rows() * kDim));
      cache->rows().decode_values(0, h, values.data());
      for (std::size_t j = 0; j < ref[h].size(); ++j) {
        for (int64_t d = 0; d < kDim; ++d) {
          ASSERT_NEAR(values[j * kDim + d], ref[h][j].value[d], 1e-5f) << "token " << t << " row " << j;
        }
      }
    }
  }
}

}  // namespace veloxquant::eviction_test
