// The eviction methods added with issue 13, each against a brute-force implementation of its
// rule (spec §6 rows 30, 33, 35), its validation errors (spec §3.4: QuantizerConfigError naming
// the field and the value) and the options that do nothing here being refused:
//   knorm      keep the lowest (or highest) key L2 norms; closed form: sinks + the newest
//              `recent` + the best norms of the rest, whatever the call split
//   keyformer  H2O's accumulation ranked with tau(t) * Gumbel(seed, position); tau 0 = H2O
//   kvzip      reliance = the most attention a row ever received; latest = TOVA
//   cam        H2O's victim blended into its most key-similar survivor (gated); drop = H2O
//   morphkv    the newest `window` rows vote (attention summed, recomputed each token); 1 = TOVA
//   chunkkv    whole position-aligned chunks evicted by mean score; chunk size 1 = the H2O scorer
//   qfilters   fixed scores sign * <k, u>, u the first keys' principal direction; retention floor
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "support/kv_test_data.h"
#include "veloxquant/eviction/eviction_test_config.h"
#include "veloxquant/eviction/scored_eviction_reference.h"

namespace veloxquant {
namespace {

using eviction_test::expect_config_error;
using eviction_test::expect_matches_reference;
using eviction_test::make_eviction_cache;
using eviction_test::RefRow;
using eviction_test::RefRule;
using eviction_test::small_budget;

// Feeds one head's `keys` (tokens x dim, f32; values = keys) to `cache` in calls of `chunk`
// tokens, calling `check(tokens fed so far)` after each call.
void feed_in_chunks(lm::KVCache& cache, const std::vector<float>& keys, int64_t tokens, int64_t dim, int64_t chunk,
                    const std::function<void(int64_t)>& check) {
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t n = std::min(chunk, tokens - t0);
    const lm::Tensor k = lm::Tensor::from_f32(
        std::vector<float>(keys.begin() + t0 * dim, keys.begin() + (t0 + n) * dim), {1, 1, n, dim}, lm::DType::F32);
    cache.update_and_fetch(k, k);
    check(t0 + n);
  }
}

// --- knorm ---------------------------------------------------------------------------------------

// The closed form of knorm's rule after `tokens` tokens: a row's score never changes, so the
// kept rows are the sinks, the newest `recent` rows and, of the rest, the budget's remainder
// with the lowest (keep low) or highest norms — in temporal order.
std::vector<int32_t> knorm_reference(const std::vector<float>& keys, int64_t tokens, int64_t dim, int64_t budget,
                                     int64_t n_sink, int64_t recent, bool keep_low) {
  std::vector<int32_t> all(static_cast<std::size_t>(tokens));
  std::iota(all.begin(), all.end(), 0);
  if (tokens <= budget) return all;
  std::vector<double> norm(static_cast<std::size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    double s = 0;
    for (int64_t d = 0; d < dim; ++d) s += double(keys[t * dim + d]) * keys[t * dim + d];
    norm[static_cast<std::size_t>(t)] = std::sqrt(s);
  }
  std::vector<int32_t> kept, rest;
  for (int32_t t = 0; t < tokens; ++t) {
    if (t < n_sink || t >= tokens - recent) {
      kept.push_back(t);
    } else {
      rest.push_back(t);
    }
  }
  std::sort(rest.begin(), rest.end(),
            [&](int32_t a, int32_t b) { return keep_low ? norm[a] < norm[b] : norm[a] > norm[b]; });
  rest.resize(static_cast<std::size_t>(budget) - kept.size());
  kept.insert(kept.end(), rest.begin(), rest.end());
  std::sort(kept.begin(), kept.end());
  return kept;
}

TEST(EvictionRules, KnormEqualsClosedFormForEveryCallSplit) {
  constexpr int64_t kDim = 16, kTokens = 150, kBudget = 12, kSinks = 2, kRecent = 3;
  for (const std::string keep : {"low", "high"}) {
    for (int64_t chunk : {1, 7, 150}) {
      SCOPED_TRACE(keep + " chunk " + std::to_string(chunk));
      KVCacheConfig c = small_budget("knorm", kBudget, kDim);
      KnormOptions& o = c.options<KnormOptions>();
      o.knorm_n_sink = kSinks;
      o.knorm_recent = kRecent;
      o.knorm_keep = keep;
      auto cache = make_eviction_cache(c);
      EXPECT_FALSE(cache->wants_queries());  // scores never use attention
      const lm::Tensor all = test_support::random_kv(1, 1, kTokens, kDim, 5, lm::DType::F32);
      const std::vector<float> keys = all.to_f32();
      feed_in_chunks(*cache, keys, kTokens, kDim, chunk, [&](int64_t fed) {
        const int32_t* got = cache->rows().positions(0, 0);
        ASSERT_EQ(std::vector<int32_t>(got, got + cache->rows().rows()),
                  knorm_reference(keys, fed, kDim, kBudget, kSinks, kRecent, keep == "low"))
            << "after " << fed << " tokens";
      });
    }
  }
}

TEST(EvictionRules, KnormValidation) {
  KVCacheConfig c = small_budget("knorm", 32);
  c.options<KnormOptions>().knorm_keep = "middle";
  expect_config_error(c, {"knorm_keep", "middle"});
  c = small_budget("knorm", 32);
  c.options<KnormOptions>().knorm_n_sink = 32;
  expect_config_error(c, {"knorm_n_sink", "32", "knorm_budget", "nothing evictable"});
  c = small_budget("knorm", 32);
  c.options<KnormOptions>().knorm_recent = 30;
  expect_config_error(c, {"knorm_recent", "30", "nothing evictable"});
  c = small_budget("knorm", 32);
  c.options<KnormOptions>().knorm_budget = 0;
  expect_config_error(c, {"knorm_budget", "0"});
}

// --- keyformer -----------------------------------------------------------------------------------

TEST(EvictionRules, KeyformerEqualsBruteForceWithAnnealedNoise) {
  KVCacheConfig c = small_budget("keyformer", 12);
  KeyformerOptions& o = c.options<KeyformerOptions>();
  o.keyformer_n_sink = 2;
  o.keyformer_recent = 2;
  o.keyformer_tau_init = 0.0;
  o.keyformer_tau_end = 0.5;
  o.keyformer_anneal_steps = 60;
  o.keyformer_seed = 9;
  RefRule rule = eviction_test::h2o_rule(12, 2, 2, 1.0, true);
  rule.rank = [](const RefRow& row, int64_t step) {
    const double tau = 0.5 * std::min(1.0, double(step) / 60.0);
    return static_cast<float>(row.score + tau * eviction::gumbel_noise(9, static_cast<int32_t>(row.pos)));
  };
  expect_matches_reference(c, rule);
  o.keyformer_tau = 0.25;  // a constant temperature overrides the annealing
  rule.rank = [](const RefRow& row, int64_t) {
    return static_cast<float>(row.score + 0.25 * eviction::gumbel_noise(9, static_cast<int32_t>(row.pos)));
  };
  expect_matches_reference(c, rule);
}

// The frozen noise is a standard Gumbel: mean = Euler-Mascheroni, variance = pi^2 / 6; it depends
// on (seed, position) only.
TEST(EvictionRules, GumbelNoiseIsStandardAndFrozen) {
  constexpr int kN = 200000;
  double sum = 0, squares = 0;
  for (int32_t p = 0; p < kN; ++p) {
    const double g = eviction::gumbel_noise(3, p);
    sum += g;
    squares += g * g;
  }
  const double mean = sum / kN, variance = squares / kN - mean * mean;
  EXPECT_NEAR(mean, 0.5772157, 0.01);
  EXPECT_NEAR(variance, M_PI * M_PI / 6.0, 0.03);
  EXPECT_EQ(eviction::gumbel_noise(3, 17), eviction::gumbel_noise(3, 17));
  EXPECT_NE(eviction::gumbel_noise(3, 17), eviction::gumbel_noise(4, 17));
}

TEST(EvictionRules, KeyformerValidationAndRefusedRopeBase) {
  KVCacheConfig c = small_budget("keyformer", 32);
  c.options<KeyformerOptions>().keyformer_tau = -1.0;
  expect_config_error(c, {"keyformer_tau", "-1"});
  c = small_budget("keyformer", 32);
  c.options<KeyformerOptions>().keyformer_tau_end = std::nan("");
  expect_config_error(c, {"keyformer_tau_end"});
  c = small_budget("keyformer", 32);
  c.options<KeyformerOptions>().keyformer_anneal_steps = -3;
  expect_config_error(c, {"keyformer_anneal_steps", "-3"});
  c = small_budget("keyformer", 32);
  c.options<KeyformerOptions>().keyformer_rope_base = 500000.0;
  expect_config_error(c, {"keyformer_rope_base", "500000", "no effect"});
  c = small_budget("keyformer", 32);
  c.options<KeyformerOptions>().keyformer_n_sink = 16;
  c.options<KeyformerOptions>().keyformer_recent = 16;
  expect_config_error(c, {"keyformer_n_sink", "keyformer_recent", "nothing evictable"});
}

// --- kvzip ---------------------------------------------------------------------------------------

TEST(EvictionRules, KVzipContextProbeKeepsTheMostRelied) {
  KVCacheConfig c = small_budget("kvzip", 12);
  c.options<KVzipOptions>().kvzip_n_sink = 2;
  RefRule rule;
  rule.budget = 12;
  rule.n_sink = 2;
  rule.combine = [](float carried, float w) { return std::max(carried, w); };
  expect_matches_reference(c, rule, 0.125f);
}

TEST(EvictionRules, KVzipValidation) {
  KVCacheConfig c = small_budget("kvzip", 32);
  c.options<KVzipOptions>().kvzip_probe = "questions";
  expect_config_error(c, {"kvzip_probe", "questions"});
  c = small_budget("kvzip", 32);
  c.options<KVzipOptions>().kvzip_n_sink = 40;
  expect_config_error(c, {"kvzip_n_sink", "40", "nothing evictable"});
}

// --- cam -------------------------------------------------------------------------------------------

// CaM's merge, brute force in doubles: the survivor with the most cosine-similar key (first
// maximum) absorbs the victim's value (and key) with weight 1/2 (mean) or s / (1 + s) (sim
// weighted, s = max(0, cosine)), if the gate draw from (seed, victim position) is below
// min(1, victim score / survivor score).
RefRule cam_rule(int64_t budget, int64_t n_sink, bool mean, bool merge_keys, bool gate, uint64_t seed) {
  RefRule rule = eviction_test::h2o_rule(budget, n_sink, 0, 1.0, true);
  rule.before_evict = [=](std::vector<RefRow>& rows, std::size_t victim) {
    const RefRow& e = rows[victim];
    std::size_t target = rows.size();
    double best = -2;
    for (std::size_t j = 0; j < rows.size(); ++j) {
      if (j == victim) continue;
      double ab = 0, aa = 0, bb = 0;
      for (std::size_t d = 0; d < e.key.size(); ++d) {
        ab += double(e.key[d]) * rows[j].key[d];
        aa += double(e.key[d]) * e.key[d];
        bb += double(rows[j].key[d]) * rows[j].key[d];
      }
      const double cosine = ab / std::sqrt(aa * bb);
      if (cosine > best) {
        best = cosine;
        target = j;
      }
    }
    RefRow& t = rows[target];
    if (gate) {
      const double p = t.score > 0 ? std::min(1.0, double(e.score) / t.score) : 1.0;
      if (eviction::uniform_noise(seed, static_cast<int32_t>(e.pos)) >= p) return;
    }
    const double a = mean ? 0.5 : std::max(0.0, best) / (1.0 + std::max(0.0, best));
    for (std::size_t d = 0; d < t.value.size(); ++d) t.value[d] = float((1 - a) * t.value[d] + a * e.value[d]);
    if (merge_keys) {
      for (std::size_t d = 0; d < t.key.size(); ++d) t.key[d] = float((1 - a) * t.key[d] + a * e.key[d]);
    }
  };
  return rule;
}

TEST(EvictionRules, CaMEqualsBruteForce) {
  for (const std::string merge : {"sim_weighted", "mean"}) {
    for (bool merge_keys : {false, true}) {
      for (bool gate : {true, false}) {
        SCOPED_TRACE(merge + (merge_keys ? " keys" : "") + (gate ? " gated" : ""));
        KVCacheConfig c = small_budget("cam", 12);
        c.seed = 77;
        CaMOptions& o = c.options<CaMOptions>();
        o.cam_n_sink = 2;
        o.cam_merge = merge;
        o.cam_merge_keys = merge_keys;
        o.cam_merge_gate = gate;
        expect_matches_reference(c, cam_rule(12, 2, merge == "mean", merge_keys, gate, 77), 0.25f);
      }
    }
  }
}

// The merged values survive a save / restore and a clone, and the stepped and chunked paths merge
// alike (the decode step takes the general selection).
TEST(EvictionRules, CaMMergedRowsRoundTrip) {
  KVCacheConfig c = small_budget("cam", 16);
  c.options<CaMOptions>().cam_merge_gate = false;
  auto cache = make_eviction_cache(c);
  const lm::Tensor k = test_support::random_kv(1, 2, 60, 32, 3), v = test_support::random_kv(1, 2, 60, 32, 4);
  cache->update_and_fetch(k, v);
  const std::vector<float> fed = v.to_f32();
  std::vector<float> stored(static_cast<std::size_t>(16 * 32));
  cache->rows().decode_values(0, 0, stored.data());
  int merged = 0;
  for (int64_t r = 0; r < 16; ++r) {
    const int32_t p = cache->rows().positions(0, 0)[r];
    merged += !std::equal(stored.begin() + r * 32, stored.begin() + (r + 1) * 32, fed.begin() + std::ptrdiff_t{p} * 32);
  }
  EXPECT_GT(merged, 0) << "no survivor absorbed an evicted value";
  auto restored = require_method("cam").make_restorable();
  restored->from_state(cache->state(), cache->meta_state());
  auto copy = cache->clone();
  const lm::Tensor k2 = test_support::random_kv(1, 2, 1, 32, 5), v2 = test_support::random_kv(1, 2, 1, 32, 6);
  const std::vector<float> want = cache->update_and_fetch(k2, v2).values.to_f32();
  EXPECT_EQ(restored->update_and_fetch(k2, v2).values.to_f32(), want);
  EXPECT_EQ(copy->update_and_fetch(k2, v2).values.to_f32(), want);
}

TEST(EvictionRules, CaMValidation) {
  KVCacheConfig c = small_budget("cam", 32);
  c.options<CaMOptions>().cam_merge = "average";
  expect_config_error(c, {"cam_merge", "average"});
  c = small_budget("cam", 32);
  c.options<CaMOptions>().cam_n_sink = 32;
  expect_config_error(c, {"cam_n_sink", "32", "nothing evictable"});
}

// --- morphkv -------------------------------------------------------------------------------------

// MorphKV, brute force in doubles with the key-as-query proxy: after each token the newest
// `window` live rows vote — each one's key attends (softmax) over the live rows up to itself — a
// row's score is the sum of its votes; over budget the lowest outside the sinks and the newest
// window - 1 rows goes (the first minimum).
std::vector<int64_t> morphkv_reference(const std::vector<float>& keys, int64_t tokens, int64_t dim, int64_t budget,
                                       int64_t n_sink, int64_t window) {
  std::vector<int64_t> live;
  const double scale = 1.0 / std::sqrt(double(dim));
  for (int64_t t = 0; t < tokens; ++t) {
    live.push_back(t);
    std::vector<double> score(live.size(), 0.0);
    const std::size_t voters = std::min<std::size_t>(live.size(), static_cast<std::size_t>(window));
    for (std::size_t v = live.size() - voters; v < live.size(); ++v) {
      std::vector<double> e(v + 1);
      double mx = -INFINITY, total = 0;
      for (std::size_t j = 0; j <= v; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d) dot += double(keys[live[j] * dim + d]) * keys[live[v] * dim + d];
        mx = std::max(mx, e[j] = dot * scale);
      }
      for (double& x : e) total += (x = std::exp(x - mx));
      for (std::size_t j = 0; j <= v; ++j) score[j] += e[j] / total;
    }
    if (static_cast<int64_t>(live.size()) <= budget) continue;
    std::size_t victim = live.size();
    for (std::size_t j = 0; j + static_cast<std::size_t>(window - 1) < live.size(); ++j) {
      if (live[j] < n_sink) continue;
      if (victim == live.size() || score[j] < score[victim]) victim = j;
    }
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
  }
  return live;
}

TEST(EvictionRules, MorphKVEqualsBruteForce) {
  constexpr int64_t kDim = 16, kTokens = 100, kBudget = 16;
  for (int64_t window : {2, 5}) {
    for (int64_t chunk : {1, 9}) {
      SCOPED_TRACE("window " + std::to_string(window) + " chunk " + std::to_string(chunk));
      KVCacheConfig c = small_budget("morphkv", kBudget, kDim);
      c.options<MorphKVOptions>().morphkv_n_sink = 2;
      c.options<MorphKVOptions>().morphkv_window = static_cast<int>(window);
      c.eviction.eviction_scoring = "proxy";
      auto cache = make_eviction_cache(c);
      std::vector<float> keys = test_support::random_kv(1, 1, kTokens, kDim, 21, lm::DType::F32).to_f32();
      for (float& x : keys) x *= 0.25f;  // smooth weights: no near-ties decided by rounding
      feed_in_chunks(*cache, keys, kTokens, kDim, chunk, [&](int64_t fed) {
        const int32_t* got = cache->rows().positions(0, 0);
        ASSERT_EQ(std::vector<int64_t>(got, got + cache->rows().rows()),
                  morphkv_reference(keys, fed, kDim, kBudget, 2, window))
            << "after " << fed << " tokens";
      });
    }
  }
}

TEST(EvictionRules, MorphKVValidation) {
  KVCacheConfig c = small_budget("morphkv", 32);
  c.options<MorphKVOptions>().morphkv_window = 0;
  expect_config_error(c, {"morphkv_window", "0"});
  c = small_budget("morphkv", 32);
  c.options<MorphKVOptions>().morphkv_n_sink = 4;
  c.options<MorphKVOptions>().morphkv_window = 29;
  expect_config_error(c, {"morphkv_window", "29", "morphkv_budget", "nothing evictable"});
}

// --- chunkkv -------------------------------------------------------------------------------------

TEST(EvictionRules, ChunkKVAttentionMassEqualsBruteForce) {
  for (int chunk : {2, 4}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    KVCacheConfig c = small_budget("chunkkv", 16);
    c.options<ChunkKVOptions>().chunkkv_n_sink = 2;
    c.options<ChunkKVOptions>().chunkkv_chunk_size = chunk;
    RefRule rule = eviction_test::h2o_rule(16, 2, 0, 1.0, true);
    rule.chunk = chunk;
    expect_matches_reference(c, rule);
  }
}

// key_norm: fixed scores -||k||, so the brute force is a plain loop over norms.
TEST(EvictionRules, ChunkKVKeyNormEqualsBruteForce) {
  constexpr int64_t kDim = 16, kTokens = 120, kBudget = 20, kChunk = 4, kSinks = 2;
  KVCacheConfig c = small_budget("chunkkv", kBudget, kDim);
  ChunkKVOptions& o = c.options<ChunkKVOptions>();
  o.chunkkv_n_sink = kSinks;
  o.chunkkv_chunk_size = kChunk;
  o.chunkkv_score = "key_norm";
  auto cache = make_eviction_cache(c);
  const std::vector<float> keys = test_support::random_kv(1, 1, kTokens, kDim, 8, lm::DType::F32).to_f32();
  std::vector<RefRow> ref;
  RefRule rule;
  rule.budget = kBudget;
  rule.n_sink = kSinks;
  rule.chunk = kChunk;
  int64_t next = 0;
  feed_in_chunks(*cache, keys, kTokens, kDim, 5, [&](int64_t fed) {
    for (; next < fed; ++next) {
      const int64_t t = next;
      double squares = 0;
      for (int64_t d = 0; d < kDim; ++d) squares += double(keys[t * kDim + d]) * keys[t * kDim + d];
      ref.push_back({t, {}, static_cast<float>(-std::sqrt(squares)), {}});
      if (static_cast<int64_t>(ref.size()) > kBudget) {
        const std::size_t first = eviction_test::ref_chunk_victim(ref, rule);
        ASSERT_LT(first, ref.size());
        ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(first),
                  ref.begin() + static_cast<std::ptrdiff_t>(first + kChunk));
      }
    }
    std::vector<int32_t> want;
    want.reserve(ref.size());
    for (const RefRow& r : ref) want.push_back(static_cast<int32_t>(r.pos));
    const int32_t* got = cache->rows().positions(0, 0);
    ASSERT_EQ(std::vector<int32_t>(got, got + cache->rows().rows()), want) << "after " << fed << " tokens";
  });
}

TEST(EvictionRules, ChunkKVValidation) {
  KVCacheConfig c = small_budget("chunkkv", 32);
  c.options<ChunkKVOptions>().chunkkv_chunk_size = 0;
  expect_config_error(c, {"chunkkv_chunk_size", "0"});
  c = small_budget("chunkkv", 32);
  c.options<ChunkKVOptions>().chunkkv_chunk_size = 12;  // sinks' chunk 12 + 2 x 12 = 36 > 32
  expect_config_error(c, {"chunkkv_budget=32", "36", "chunkkv_chunk_size=12"});
  c = small_budget("chunkkv", 32);
  c.options<ChunkKVOptions>().chunkkv_score = "entropy";
  expect_config_error(c, {"chunkkv_score", "entropy"});
  c = small_budget("chunkkv", 32);
  c.options<ChunkKVOptions>().chunkkv_reuse_layers = 2;
  expect_config_error(c, {"chunkkv_reuse_layers=2", "not implemented"});
}

// --- qfilters ------------------------------------------------------------------------------------

// Keys with one dominant direction (Q-Filters' premise, and a clear eigengap for the SVD):
// uniform noise plus a per-token multiple of a fixed direction.
std::vector<float> keys_with_a_direction(int64_t tokens, int64_t dim, uint64_t seed) {
  std::vector<float> keys = test_support::random_kv(1, 1, tokens, dim, seed, lm::DType::F32).to_f32();
  const std::vector<float> coeff = test_support::random_kv(1, 1, tokens, 1, seed + 1, lm::DType::F32).to_f32();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t d = 0; d < dim; ++d) keys[t * dim + d] += 2.0f * coeff[t] * float(d % 3 == 0 ? 1 : -1);
  }
  return keys;
}

// The principal direction by brute force: power iteration in doubles from a random start,
// oriented so the keys' mean projection is >= 0.
std::vector<double> reference_direction(const std::vector<float>& keys, int64_t rows, int64_t dim) {
  std::vector<double> v(static_cast<std::size_t>(dim));
  for (int64_t d = 0; d < dim; ++d) v[d] = std::sin(1.0 + 7.0 * d);
  for (int it = 0; it < 2000; ++it) {
    std::vector<double> kv(static_cast<std::size_t>(rows), 0.0), next(v.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) kv[r] += keys[r * dim + d] * v[d];
    double norm = 0;
    for (int64_t d = 0; d < dim; ++d) {
      for (int64_t r = 0; r < rows; ++r) next[d] += keys[r * dim + d] * kv[r];
      norm += next[d] * next[d];
    }
    for (int64_t d = 0; d < dim; ++d) v[d] = next[d] / std::sqrt(norm);
  }
  double mean = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < dim; ++d) mean += keys[r * dim + d] * v[d];
  if (mean < 0)
    for (double& x : v) x = -x;
  return v;
}

// The positions Q-Filters keeps after `fed` tokens, in closed form: all of them up to the budget;
// past it the sinks, the recent tokens and the rest with the highest sign * <key, u>, ascending.
std::vector<int32_t> qfilters_rows(const std::vector<float>& keys, const std::vector<double>& u, int64_t fed, int sign,
                                   int64_t dim, int64_t budget, int64_t sinks, int64_t recent) {
  std::vector<int32_t> all(static_cast<std::size_t>(fed));
  std::iota(all.begin(), all.end(), 0);
  if (fed <= budget) return all;
  std::vector<int32_t> want, rest;
  for (int32_t t : all) (t < sinks || t >= fed - recent ? want : rest).push_back(t);
  std::vector<double> score(static_cast<std::size_t>(fed));
  for (int64_t t = 0; t < fed; ++t) {
    for (int64_t d = 0; d < dim; ++d) score[t] += sign * keys[t * dim + d] * u[d];
  }
  std::sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  rest.resize(budget - want.size());
  want.insert(want.end(), rest.begin(), rest.end());
  std::sort(want.begin(), want.end());
  return want;
}

TEST(EvictionRules, QFiltersEqualsClosedForm) {
  constexpr int64_t kDim = 16, kTokens = 120, kBudget = 16, kSinks = 2, kRecent = 2, kCalib = 24;
  const std::vector<float> keys = keys_with_a_direction(kTokens, kDim, 31);
  // The calibration window is min(calib_tokens, budget + 1) = 17 tokens.
  const std::vector<double> u = reference_direction(keys, kBudget + 1, kDim);
  for (int sign : {1, -1}) {
    for (int64_t chunk : {1, 7, 120}) {
      SCOPED_TRACE("sign " + std::to_string(sign) + " chunk " + std::to_string(chunk));
      KVCacheConfig c = small_budget("qfilters", kBudget, kDim);
      QFiltersOptions& o = c.options<QFiltersOptions>();
      o.qfilters_n_sink = kSinks;
      o.qfilters_recent = kRecent;
      o.qfilters_calib_tokens = kCalib;
      o.qfilters_sign = sign;
      o.qfilters_min_retention.reset();
      auto cache = make_eviction_cache(c);
      EXPECT_FALSE(cache->wants_queries());
      feed_in_chunks(*cache, keys, kTokens, kDim, chunk, [&](int64_t fed) {
        const std::vector<int32_t> want = qfilters_rows(keys, u, fed, sign, kDim, kBudget, kSinks, kRecent);
        const int32_t* got = cache->rows().positions(0, 0);
        ASSERT_EQ(std::vector<int32_t>(got, got + cache->rows().rows()), want) << "after " << fed << " tokens";
      });
      // The saved direction is the reference's.
      const std::vector<float> state = cache->state().back().to_f32();
      ASSERT_EQ(state.size(), static_cast<std::size_t>(kDim + 1));
      EXPECT_EQ(state[kDim], 1.0f);  // calibrated
      for (int64_t d = 0; d < kDim; ++d) EXPECT_NEAR(state[d], u[d], 1e-4);
    }
  }
}

// The direction travels with save / restore and clone: the copies evict as the original does.
TEST(EvictionRules, QFiltersDirectionSurvivesRestoreAndClone) {
  constexpr int64_t kDim = 16;
  KVCacheConfig c = small_budget("qfilters", 16, kDim);
  c.options<QFiltersOptions>().qfilters_min_retention.reset();
  auto cache = make_eviction_cache(c);
  const std::vector<float> keys = keys_with_a_direction(90, kDim, 41);
  feed_in_chunks(*cache, std::vector<float>(keys.begin(), keys.begin() + 40 * kDim), 40, kDim, 40, [](int64_t) {});
  auto restored = require_method("qfilters").make_restorable();
  restored->from_state(cache->state(), cache->meta_state());
  auto copy = cache->clone();
  for (auto* other : {restored.get(), copy.get()}) {
    auto original = cache->clone();
    const std::vector<float> rest(keys.begin() + 40 * kDim, keys.end());
    feed_in_chunks(*original, rest, 50, kDim, 1, [](int64_t) {});
    feed_in_chunks(*other, rest, 50, kDim, 1, [](int64_t) {});
    const auto* a = dynamic_cast<const eviction::EvictionCache*>(original.get());
    const auto* b = dynamic_cast<const eviction::EvictionCache*>(other);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(std::vector<int32_t>(a->rows().positions(0, 0), a->rows().positions(0, 0) + 16),
              std::vector<int32_t>(b->rows().positions(0, 0), b->rows().positions(0, 0) + 16));
  }
}

TEST(EvictionRules, QFiltersRetentionFloor) {
  KVCacheConfig c = small_budget("qfilters", 18);
  c.options<QFiltersOptions>().qfilters_min_retention = 0.9;  // 18 / 20 = 0.9 holds, 18 / 21 does not
  c.options<QFiltersOptions>().qfilters_on_low_retention = "raise";
  auto cache = make_eviction_cache(c);
  const lm::Tensor k20 = test_support::random_kv(1, 1, 20, 32, 1);
  EXPECT_NO_THROW(cache->update_and_fetch(k20, k20));
  const lm::Tensor k1 = test_support::random_kv(1, 1, 1, 32, 2);
  try {
    cache->update_and_fetch(k1, k1);
    FAIL() << "no error below the retention floor";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("minimum retention"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(cache->update_and_fetch(k1, k1));  // reported once
  for (const std::string action : {"warn", "ignore"}) {
    c.options<QFiltersOptions>().qfilters_on_low_retention = action;
    auto quiet = make_eviction_cache(c);
    const lm::Tensor k = test_support::random_kv(1, 1, 40, 32, 3);
    EXPECT_NO_THROW(quiet->update_and_fetch(k, k)) << action;
  }
}

TEST(EvictionRules, QFiltersValidation) {
  KVCacheConfig c = small_budget("qfilters", 32);
  c.options<QFiltersOptions>().qfilters_sign = 0;
  expect_config_error(c, {"qfilters_sign", "0"});
  c = small_budget("qfilters", 32);
  c.options<QFiltersOptions>().qfilters_calib_tokens = 0;
  expect_config_error(c, {"qfilters_calib_tokens", "0"});
  c = small_budget("qfilters", 32);
  c.options<QFiltersOptions>().qfilters_min_retention = 1.5;
  expect_config_error(c, {"qfilters_min_retention", "1.5"});
  c = small_budget("qfilters", 32);
  c.options<QFiltersOptions>().qfilters_on_low_retention = "shout";
  expect_config_error(c, {"qfilters_on_low_retention", "shout"});
}

// --- reductions: settings under which a method is exactly an older rule ---------------------------

// keyformer at tau 0, cam dropping, chunkkv with chunks of 1: the H2O scorer without decay or
// grace; kvzip probing the latest step and morphkv with a window of 1: TOVA.
TEST(EvictionRules, ReductionsToH2OAndTova) {
  struct Reduction {
    std::string method;
    std::function<void(KVCacheConfig&)> set;
    bool accumulate;  // true: the H2O scorer, false: TOVA
  };
  const std::vector<Reduction> reductions = {
      {"keyformer", [](KVCacheConfig& c) { c.options<KeyformerOptions>().keyformer_tau = 0.0; }, true},
      {"cam", [](KVCacheConfig& c) { c.options<CaMOptions>().cam_merge = "drop"; }, true},
      {"chunkkv", [](KVCacheConfig& c) { c.options<ChunkKVOptions>().chunkkv_chunk_size = 1; }, true},
      {"kvzip", [](KVCacheConfig& c) { c.options<KVzipOptions>().kvzip_probe = "latest"; }, false},
      {"morphkv", [](KVCacheConfig& c) { c.options<MorphKVOptions>().morphkv_window = 1; }, false},
  };
  for (const Reduction& r : reductions) {
    SCOPED_TRACE(r.method);
    KVCacheConfig c = small_budget(r.method, 12);
    r.set(c);
    // Two sinks, through the method's own field.
    for (const FieldSpec& f : require_method(r.method).fields) {
      if (f.name == r.method + "_n_sink") f.set(c, int64_t{2});
    }
    expect_matches_reference(c, eviction_test::h2o_rule(12, 2, 0, 1.0, r.accumulate));
  }
}

// --- options of the first methods that did nothing are refused, not silently accepted ----------

TEST(EvictionRules, OptionsWithoutEffectAreRefused) {
  KVCacheConfig c = small_budget("h2o", 32);
  c.h2o.h2o_rope_base = 1e6;
  expect_config_error(c, {"h2o_rope_base", "no effect"});
  c = small_budget("tova", 32);
  c.tova.tova_backend = "metal";
  expect_config_error(c, {"tova_backend", "metal", "no effect"});
  c = small_budget("snapkv", 32);
  c.snapkv.snap_backend = "mlx";
  expect_config_error(c, {"snap_backend", "mlx", "no effect"});
  c = small_budget("snapkv", 32);
  c.snapkv.snap_batched_scoring = false;
  expect_config_error(c, {"snap_batched_scoring", "no effect"});
  c = small_budget("pyramidkv", 32);
  c.pyramidkv.pyramid_backend = "metal";
  expect_config_error(c, {"pyramid_backend", "metal", "no effect"});
  c = small_budget("h2o", 32);
  c.enable_fused_query_dot = true;
  expect_config_error(c, {"enable_fused_query_dot", "no effect"});
  c = small_budget("h2o", 32);
  c.enable_vectorized_attend = false;
  expect_config_error(c, {"enable_vectorized_attend", "no effect"});
  c = small_budget("h2o", 32);
  c.bit_width_outlier = 4;
  expect_config_error(c, {"bit_width_outlier", "no effect"});
  // The accepted values still pass.
  c = small_budget("snapkv", 32);
  c.snapkv.snap_backend = "reference";
  EXPECT_NO_THROW(validate_for_create(c));
  c.snapkv.snap_backend = "auto";
  EXPECT_NO_THROW(validate_for_create(c));
}

// Options structs kept in the config's OptionsBag are values: a copied config is independent.
TEST(EvictionRules, BagOptionsCopyWithTheConfig) {
  KVCacheConfig a = small_budget("knorm", 32);
  KVCacheConfig b = a;
  b.options<KnormOptions>().knorm_budget = 64;
  EXPECT_EQ(a.options<KnormOptions>().knorm_budget, 32);
  EXPECT_EQ(b.options<KnormOptions>().knorm_budget, 64);
  const FieldSpec* budget = find_field("knorm_budget");
  ASSERT_NE(budget, nullptr);
  EXPECT_EQ(std::get<int64_t>(budget->default_value()), 512);
  budget->set(a, int64_t{48});
  EXPECT_EQ(a.options<KnormOptions>().knorm_budget, 48);
  const FieldSpec* tau = find_field("keyformer_tau");
  ASSERT_NE(tau, nullptr);
  EXPECT_EQ(tau->type, FieldType::kOptionalFloat);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(parse_field_value(*tau, "None")));
  EXPECT_EQ(std::get<double>(parse_field_value(*tau, "0.5")), 0.5);
}

}  // namespace
}  // namespace veloxquant
