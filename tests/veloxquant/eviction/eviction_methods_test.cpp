// The five eviction methods one by one: the original's validation errors, each policy against a
// brute-force reimplementation of its rule from the spec (§6 "H2O-scorer", SnapKV's vote,
// StreamingLLM's window), exact byte counts for every storage, the real-query path, and
// save/restore and clone after eviction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lm/cache/prompt_cache_file.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "veloxquant/eviction/eviction_test_config.h"
#include "veloxquant/eviction/scored_eviction_reference.h"

namespace veloxquant {
namespace {

using eviction_test::expect_config_error;
using eviction_test::expect_matches_reference;
using eviction_test::make_eviction_cache;
using eviction_test::small_budget;

TEST(EvictionMethods, OriginalValidationErrors) {
  KVCacheConfig c = small_budget("h2o", 32);
  c.h2o.h2o_n_sink = 32;
  expect_config_error(c, {"h2o_n_sink", "32", "h2o_budget", "nothing evictable"});
  c = small_budget("h2o", 32);
  c.h2o.h2o_n_sink = 20;
  c.h2o.h2o_grace = 12;
  expect_config_error(c, {"h2o_n_sink", "h2o_grace", "20", "12", "nothing evictable"});
  for (double decay : {0.0, -0.5, 1.5}) {
    c = small_budget("h2o", 32);
    c.h2o.h2o_decay = decay;
    expect_config_error(c, {"h2o_decay", "(0, 1]", std::to_string(decay)});
  }
  c = small_budget("pyramidkv", 32);
  c.pyramidkv.pyramid_beta = 0.5;
  expect_config_error(c, {"pyramid_beta", "0.5"});
  c = small_budget("pyramidkv", 32);
  c.pyramidkv.pyramid_grace = -1;
  expect_config_error(c, {"pyramid_grace", "-1"});
  c = small_budget("pyramidkv", 32);
  c.pyramidkv.pyramid_n_sink = 40;
  expect_config_error(c, {"pyramid_n_sink", "40", "nothing evictable"});
  c = small_budget("tova", 32);
  c.tova.tova_n_sink = 33;
  expect_config_error(c, {"tova_n_sink", "33"});
  c = small_budget("snapkv", 32);
  c.snapkv.snap_backend = "cuda";
  expect_config_error(c, {"snap_backend", "cuda"});
  c = small_budget("snapkv", 32);
  c.snapkv.snap_dtype = "bfloat16";
  expect_config_error(c, {"snap_dtype", "bfloat16"});
  c = small_budget("streaming_llm", 32);
  c.eviction.eviction_storage = "zip";
  expect_config_error(c, {"eviction_storage", "zip"});
  c = small_budget("tova", 32);
  c.eviction.eviction_scoring = "oracle";
  expect_config_error(c, {"eviction_scoring", "oracle"});
  c = small_budget("h2o", 32);
  c.eviction.eviction_storage = "kivi";
  c.bit_width_inlier = 9;
  expect_config_error(c, {"bit_width_inlier", "9"});
  // The edges that are allowed: decay 1, sinks + grace one below the budget, beta 1.
  c = small_budget("h2o", 32);
  c.h2o.h2o_decay = 1.0;
  c.h2o.h2o_n_sink = 4;
  c.h2o.h2o_grace = 27;
  EXPECT_NO_THROW(require_method("h2o").make_serving(c));
  c = small_budget("pyramidkv", 32);
  c.pyramidkv.pyramid_beta = 1.0;
  EXPECT_NO_THROW(require_method("pyramidkv").make_serving(c));
}

// --- the H2O scorer against its brute force (scored_eviction_reference.h) ---------------------

TEST(EvictionMethods, H2OEqualsBruteForce) {
  KVCacheConfig c = small_budget("h2o", 12);
  c.h2o.h2o_n_sink = 2;
  c.h2o.h2o_grace = 3;
  c.h2o.h2o_decay = 0.9;
  expect_matches_reference(c, eviction_test::h2o_rule(12, 2, 3, 0.9, true));
}

TEST(EvictionMethods, TovaEqualsBruteForce) {
  KVCacheConfig c = small_budget("tova", 12);
  c.tova.tova_n_sink = 2;
  expect_matches_reference(c, eviction_test::h2o_rule(12, 2, 0, 1.0, false));
}

TEST(EvictionMethods, PyramidKVAloneEqualsBruteForceH2OWithoutDecay) {
  KVCacheConfig c = small_budget("pyramidkv", 12);
  c.pyramidkv.pyramid_n_sink = 2;
  c.pyramidkv.pyramid_grace = 0;  // the original: no grace
  expect_matches_reference(c, eviction_test::h2o_rule(12, 2, 0, 1.0, true));
  c.pyramidkv.pyramid_grace = 3;
  expect_matches_reference(c, eviction_test::h2o_rule(12, 2, 3, 1.0, true));
  c.pyramidkv.pyramid_grace = 50;  // limited to budget - n_sink - 1 = 9 rows
  expect_matches_reference(c, eviction_test::h2o_rule(12, 2, 9, 1.0, true));
}

TEST(EvictionMethods, StreamingKeepsSinksAndTheNewestWindow) {
  KVCacheConfig c = small_budget("streaming_llm", 8);
  c.streaming_llm.stream_n_sink = 2;
  c.streaming_llm.stream_window_size = 6;
  auto cache = make_eviction_cache(c);
  EXPECT_FALSE(cache->wants_queries());
  cache->update_and_fetch(test_support::random_kv(1, 1, 7, 32, 1), test_support::random_kv(1, 1, 7, 32, 2));
  cache->update_and_fetch(test_support::random_kv(1, 1, 13, 32, 3), test_support::random_kv(1, 1, 13, 32, 4));
  const int32_t* p = cache->rows().positions(0, 0);
  EXPECT_EQ(std::vector<int32_t>(p, p + cache->rows().rows()), (std::vector<int32_t>{0, 1, 14, 15, 16, 17, 18, 19}));
}

// SnapKV's prefill vote, brute force: the last obs_window keys of the chunk attend causally,
// votes summed, averaged over 5 neighbouring rows; keep sinks, window and the best votes.
TEST(EvictionMethods, SnapKVPrefillVoteEqualsBruteForce) {
  constexpr int64_t kDim = 16, kTokens = 60, kBudget = 16, kWindow = 8, kSinks = 4;
  KVCacheConfig c = small_budget("snapkv", kBudget, kDim);
  c.eviction.eviction_scoring = "proxy";
  auto cache = make_eviction_cache(c);
  const lm::Tensor k = test_support::random_kv(1, 1, kTokens, kDim, 77, lm::DType::F32);
  cache->update_and_fetch(k, k);
  const std::vector<float> kf = k.to_f32();
  std::vector<double> votes(kTokens, 0.0);
  const float scale = 1.0f / std::sqrt(float(kDim));
  for (int64_t t = kTokens - kWindow; t < kTokens; ++t) {
    std::vector<double> e(static_cast<std::size_t>(t + 1));
    double mx = -INFINITY, total = 0;
    for (int64_t j = 0; j <= t; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < kDim; ++d) dot += double(kf[j * kDim + d]) * kf[t * kDim + d];
      mx = std::max(mx, e[j] = dot * scale);
    }
    for (double& x : e) total += (x = std::exp(x - mx));
    for (int64_t j = 0; j <= t; ++j) votes[j] += static_cast<float>(e[j] / total);
  }
  std::vector<std::pair<double, int32_t>> rest;
  for (int64_t j = kSinks; j < kTokens - kWindow; ++j) {
    double sum = 0;
    int n = 0;
    for (int64_t i = std::max<int64_t>(0, j - 2); i <= std::min<int64_t>(kTokens - 1, j + 2); ++i, ++n) sum += votes[i];
    rest.push_back({-static_cast<float>(sum / n), static_cast<int32_t>(j)});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int32_t> want = {0, 1, 2, 3};
  for (int64_t i = 0; i < kBudget - kSinks - kWindow; ++i) want.push_back(rest[i].second);
  for (int64_t j = kTokens - kWindow; j < kTokens; ++j) want.push_back(static_cast<int32_t>(j));
  std::sort(want.begin(), want.end());
  const int32_t* p = cache->rows().positions(0, 0);
  EXPECT_EQ(std::vector<int32_t>(p, p + cache->rows().rows()), want);
  // Decode steps keep the budget (the newest window protected).
  for (int step = 0; step < 20; ++step) {
    const lm::Tensor k1 = test_support::random_kv(1, 1, 1, kDim, 500 + step, lm::DType::F32);
    cache->update_and_fetch(k1, k1);
    EXPECT_EQ(cache->rows().rows(), kBudget);
    EXPECT_EQ(cache->rows().positions(0, 0)[kBudget - 1], kTokens + step);
  }
}

// --- bytes ------------------------------------------------------------------------------------

std::size_t measured_nbytes(const KVCacheConfig& c, lm::DType dtype, std::size_t* allocated) {
  const auto before = test_support::allocation_snapshot();
  auto cache = make_eviction_cache(c);
  cache->update_and_fetch(test_support::random_kv(1, 2, 100, 64, 1, dtype),
                          test_support::random_kv(1, 2, 100, 64, 2, dtype));
  for (int i = 0; i < 10; ++i) {
    cache->update_and_fetch(test_support::random_kv(1, 2, 1, 64, 3 + i, dtype),
                            test_support::random_kv(1, 2, 1, 64, 4, dtype));
  }
  *allocated =
      static_cast<std::size_t>(test_support::allocation_snapshot().aligned_live_bytes - before.aligned_live_bytes);
  return cache->nbytes();
}

TEST(EvictionMethods, NbytesIsExactForEveryStorage) {
  // B = 1, H = 2, D = Dv = 64, budget 32 rows per head; per row: positions 4 bytes, scores 4
  // (score-based methods only).
  struct Case {
    std::string method, storage;
    int value_bits;
    lm::DType dtype;
    std::size_t bytes;
  };
  const std::vector<Case> cases = {
      // f16 rows: 2 x 32 x (128 + 128 + 4 + 4)
      {"h2o", "dtype", 0, lm::DType::F16, 16896},
      // no scores: 2 x 32 x (128 + 128 + 4)
      {"streaming_llm", "dtype", 0, lm::DType::F16, 16640},
      // f32 rows: 2 x 32 x (256 + 256 + 4 + 4)
      {"tova", "dtype", 0, lm::DType::F32, 33280},
      // RVQ 4-bit keys: 2 streams of 32 bytes + bf16 norm = 66; f16 values 128: 2 x 32 x 202
      {"snapkv", "turboquant_rvq", 0, lm::DType::F16, 12928},
      // RVQ keys 66 + values 4-bit group 32: 8 words (32 bytes) + 2 x (scale, min) f16 (8) = 40
      {"h2o", "turboquant_rvq", 4, lm::DType::F16, 7296},
      // kivi: keys and values 40 bytes each: 2 x 32 x (40 + 40 + 4 + 4)
      {"pyramidkv", "kivi", 0, lm::DType::F16, 5632},
      {"streaming_llm", "kivi", 0, lm::DType::BF16, 5376},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.method + " / " + k.storage);
    KVCacheConfig c = small_budget(k.method, 32, 64);
    c.eviction.eviction_storage = k.storage;
    c.turboquant_rvq.rvq_value_bits = k.value_bits;
    std::size_t allocated = 0;
    EXPECT_EQ(measured_nbytes(c, k.dtype, &allocated), k.bytes);
    EXPECT_EQ(allocated, k.bytes);
  }
}

TEST(EvictionMethods, QuantizedStorageReturnsCloseRowsAndExactNewRows) {
  for (const std::string storage : {"turboquant_rvq", "kivi"}) {
    SCOPED_TRACE(storage);
    KVCacheConfig c = small_budget("h2o", 32, 64);
    c.eviction.eviction_storage = storage;
    c.bit_width_inlier = 8;
    auto cache = make_eviction_cache(c);
    const lm::Tensor k = test_support::random_kv(1, 2, 20, 64, 5), v = test_support::random_kv(1, 2, 20, 64, 6);
    cache->update_and_fetch(k, v);
    const lm::Tensor k1 = test_support::random_kv(1, 2, 1, 64, 7), v1 = test_support::random_kv(1, 2, 1, 64, 8);
    const lm::KeysValues got = cache->update_and_fetch(k1, v1);
    ASSERT_EQ(got.keys.dim(2), 21);
    const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32(), wk = k.to_f32(), wv = v.to_f32();
    const std::vector<float> nk = k1.to_f32();
    double worst = 0;
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t t = 0; t < 20; ++t) {
        for (int64_t d = 0; d < 64; ++d) {
          worst = std::max(worst, double(std::fabs(gk[(h * 21 + t) * 64 + d] - wk[(h * 20 + t) * 64 + d])));
          worst = std::max(worst, double(std::fabs(gv[(h * 21 + t) * 64 + d] - wv[(h * 20 + t) * 64 + d])));
        }
      }
      for (int64_t d = 0; d < 64; ++d) EXPECT_EQ(gk[(h * 21 + 20) * 64 + d], nk[h * 64 + d]);  // this call's row: exact
    }
    EXPECT_GT(worst, 0.0);   // really quantized
    EXPECT_LT(worst, 0.25);  // 8 bits over values in [-4, 4)
  }
}

// --- queries ------------------------------------------------------------------------------------

TEST(EvictionMethods, RealQueriesAreUsedWhenOffered) {
  for (const std::string method : {"h2o", "tova", "snapkv", "pyramidkv"}) {
    SCOPED_TRACE(method);
    KVCacheConfig c = small_budget(method, 16, 16);
    auto with_queries = make_eviction_cache(c);
    c.eviction.eviction_scoring = "proxy";
    auto proxy = make_eviction_cache(c);
    EXPECT_TRUE(with_queries->wants_queries());
    EXPECT_FALSE(proxy->wants_queries());
    // Queries equal to the keys for both query heads of each kv head's group (GQA 4:2): the mean
    // of two equal softmaxes is the proxy's softmax, so the kept rows must agree exactly.
    for (int64_t s : {40, 1, 1, 7, 1}) {
      const lm::Tensor k = test_support::random_kv(1, 2, s, 16, 900 + s, lm::DType::F32);
      const std::vector<float> kf = k.to_f32();
      lm::Tensor q({1, 4, s, 16}, lm::DType::F32);
      for (int64_t h = 0; h < 4; ++h) std::copy_n(kf.data() + (h / 2) * s * 16, s * 16, q.data<float>() + h * s * 16);
      with_queries->observe_queries(q);
      with_queries->update_and_fetch(k, k);
      EXPECT_TRUE(with_queries->last_update_used_queries());
      proxy->update_and_fetch(k, k);
      EXPECT_FALSE(proxy->last_update_used_queries());
      for (int64_t h = 0; h < 2; ++h) {
        const int32_t* a = with_queries->rows().positions(0, h);
        const int32_t* b = proxy->rows().positions(0, h);
        EXPECT_EQ(std::vector<int32_t>(a, a + 16), std::vector<int32_t>(b, b + 16));
      }
    }
    // Without an observation for this call the cache falls back to the proxy.
    with_queries->update_and_fetch(test_support::random_kv(1, 2, 1, 16, 5), test_support::random_kv(1, 2, 1, 16, 6));
    EXPECT_FALSE(with_queries->last_update_used_queries());
  }
}

// --- state and clone after eviction ------------------------------------------------------------

TEST(EvictionMethods, SaveRestoreAndCloneAfterEvictionContinueIdentically) {
  integration::register_prompt_cache_types();
  for (const std::string& method : eviction_test::eviction_methods()) {
    for (const std::string storage : {"dtype", "turboquant_rvq", "kivi"}) {
      SCOPED_TRACE(std::string(method).append(" / ").append(storage));
      KVCacheConfig c = small_budget(method, 16, 32);
      c.eviction.eviction_storage = storage;
      auto cache = make_eviction_cache(c);
      cache->update_and_fetch(test_support::random_kv(1, 2, 50, 32, 1), test_support::random_kv(1, 2, 50, 32, 2));
      for (int i = 0; i < 5; ++i) {
        cache->update_and_fetch(test_support::random_kv(1, 2, 1, 32, 10 + i),
                                test_support::random_kv(1, 2, 1, 32, 20 + i));
      }
      std::shared_ptr<lm::KVCache> restored = lm::make_cache_of_type(cache->type_name());
      restored->from_state(cache->state(), cache->meta_state());
      std::shared_ptr<lm::KVCache> copy = cache->clone();
      EXPECT_EQ(restored->offset(), 55);
      EXPECT_EQ(restored->nbytes(), cache->nbytes());
      for (int i = 0; i < 6; ++i) {
        const int64_t s = i == 2 ? 9 : 1;
        const lm::Tensor k = test_support::random_kv(1, 2, s, 32, 40 + i),
                         v = test_support::random_kv(1, 2, s, 32, 50 + i);
        EXPECT_EQ(restored->make_mask(s, 8).explicit_mask.to_f32(), cache->make_mask(s, 8).explicit_mask.to_f32());
        const lm::KeysValues a = cache->update_and_fetch(k, v);
        const lm::KeysValues b = restored->update_and_fetch(k, v);
        const lm::KeysValues d = copy->update_and_fetch(k, v);
        EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
        EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
        EXPECT_EQ(a.keys.to_f32(), d.keys.to_f32());
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant
