// kivi_sink against an independent reference written from its card (docs/methods/kivi_sink.md):
// KIVI's group code (keys per channel over token groups, values per token over channel groups,
// f16 (scale, min)), the n rows with the highest mean key L2 norm over the heads kept exact, each
// neutralized in its key group by the nearest non-sink row (ties to the earlier) before the
// group's parameters are taken.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "base/half.h"
#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/kv_test_data.h"
#include "support/reference_attention.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

// What a kivi_sink cache fed k, v ([1, H, T, D] f32, one call) returns, and its sinks.
struct Reference {
  std::vector<float> keys, values;
  std::vector<int64_t> sinks;
};

Reference reference_kivi_sink(const std::vector<float>& k, const std::vector<float>& v, int64_t heads, int64_t tokens,
                              int64_t d, int bits, int64_t group, int64_t residual, int64_t n_sink) {
  const int64_t frontier = (std::max<int64_t>(0, tokens - residual) / group) * group;
  const auto at = [&](int64_t h, int64_t t) { return (h * tokens + t) * d; };
  std::vector<double> score(static_cast<std::size_t>(frontier));
  for (int64_t t = 0; t < frontier; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      double sq = 0;
      for (int64_t c = 0; c < d; ++c) sq += double(k[at(h, t) + c]) * k[at(h, t) + c];
      score[t] += std::sqrt(sq) / double(heads);
    }
  }
  std::vector<int64_t> order(static_cast<std::size_t>(frontier));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  Reference ref;
  ref.sinks.assign(order.begin(), order.begin() + std::min<int64_t>(n_sink, frontier));
  std::sort(ref.sinks.begin(), ref.sinks.end());
  const auto is_sink = [&](int64_t t) { return std::find(ref.sinks.begin(), ref.sinks.end(), t) != ref.sinks.end(); };
  std::vector<float> nk = k, nv = v;
  for (int64_t s : ref.sinks) {
    const int64_t g0 = s / group * group;
    for (int64_t dist = 1; dist < group; ++dist) {
      int64_t source = -1;
      for (int64_t j : {s - dist, s + dist}) {
        if (source < 0 && j >= g0 && j < g0 + group && !is_sink(j)) source = j;
      }
      if (source < 0) continue;
      for (int64_t h = 0; h < heads; ++h) {
        std::copy_n(k.begin() + at(h, source), d, nk.begin() + at(h, s));
        std::copy_n(v.begin() + at(h, source), d, nv.begin() + at(h, s));
      }
      break;
    }
  }
  ref.keys = k;
  ref.values = v;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t g = 0; g < frontier / group; ++g) {
      for (int64_t c = 0; c < d; ++c) {
        std::vector<float> col;
        for (int64_t t = 0; t < group; ++t) col.push_back(nk[at(h, g * group + t) + c]);
        const std::vector<float> q = reference_group(col, bits);
        for (int64_t t = 0; t < group; ++t) ref.keys[at(h, g * group + t) + c] = q[t];
      }
    }
    for (int64_t t = 0; t < frontier; ++t) {
      for (int64_t c0 = 0; c0 < d; c0 += group) {
        const int64_t n = std::min(group, d - c0);
        const std::vector<float> q =
            reference_group({nv.begin() + at(h, t) + c0, nv.begin() + at(h, t) + c0 + n}, bits);
        std::copy(q.begin(), q.end(), ref.values.begin() + at(h, t) + c0);
      }
    }
    for (int64_t s : ref.sinks) {  // sinks come back exactly
      std::copy_n(k.begin() + at(h, s), d, ref.keys.begin() + at(h, s));
      std::copy_n(v.begin() + at(h, s), d, ref.values.begin() + at(h, s));
    }
  }
  return ref;
}

KiviVariant sink_variant(int n) {
  KiviVariant v;
  v.type_name = "KiviSinkCache";
  v.sinks = SinkRule::kTopKeyNorm;
  v.sink_slots = n;
  return v;
}

// Keys [1, heads, tokens, d] f32 with rows `planted` scaled by `factor` in every head.
lm::Tensor keys_with_sinks(int64_t heads, int64_t tokens, int64_t d, uint64_t seed, const std::vector<int64_t>& planted,
                           float factor) {
  std::vector<float> k = test_support::random_kv(1, heads, tokens, d, seed, lm::DType::F32).to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (std::size_t i = 0; i < planted.size(); ++i) {
      for (int64_t c = 0; c < d; ++c) k[(h * tokens + planted[i]) * d + c] *= factor + float(i);
    }
  }
  return lm::Tensor::from_f32(k, {1, heads, tokens, d}, lm::DType::F32);
}

TEST(KiviSinkCache, MatchesTheReferenceBitExactly) {
  const int64_t h = 2, t = 45, d = 16, group = 8, residual = 4;
  const lm::Tensor k = keys_with_sinks(h, t, d, 11, {3, 9, 10, 17, 42}, 6.0f);  // 42 lies in the tail
  const lm::Tensor v = test_support::random_kv(1, h, t, d, 12, lm::DType::F32);
  KiviCache cache(d, 2, group, residual, sink_variant(3));
  const lm::KeysValues got = cache.update_and_fetch(k, v);
  ASSERT_EQ(cache.frontier(), 40);
  const Reference ref = reference_kivi_sink(k.to_f32(), v.to_f32(), h, t, d, 2, group, residual, 3);
  // Rows 9, 10 and 17 are the strongest below the frontier (factors 7, 8, 9); 3 has no slot left.
  ASSERT_EQ(ref.sinks, (std::vector<int64_t>{9, 10, 17}));
  ASSERT_EQ(cache.sinks().count(0), 3);
  EXPECT_EQ(std::vector<int32_t>(cache.sinks().positions(0), cache.sinks().positions(0) + 3),
            (std::vector<int32_t>{9, 10, 17}));
  EXPECT_EQ(got.keys.to_f32(), ref.keys);
  EXPECT_EQ(got.values.to_f32(), ref.values);
}

TEST(KiviSinkCache, ASinkNoLongerStretchesItsGroup) {
  // One huge row per group: plain KIVI spends each group's key range on it, kivi_sink does not.
  const int64_t h = 1, t = 64, d = 32, group = 32;
  const lm::Tensor k = keys_with_sinks(h, t, d, 5, {0, 40}, 20.0f);
  const lm::Tensor v = test_support::random_kv(1, h, t, d, 6, lm::DType::F32);
  KiviCache kivi(d, 2, group, 0), sink(d, 2, group, 0, sink_variant(2));
  const std::vector<float> a = kivi.update_and_fetch(k, v).keys.to_f32();
  const std::vector<float> b = sink.update_and_fetch(k, v).keys.to_f32();
  const std::vector<float> x = k.to_f32();
  double err_kivi = 0, err_sink = 0;
  for (int64_t r = 0; r < t; ++r) {
    if (r == 0 || r == 40) {
      for (int64_t c = 0; c < d; ++c) EXPECT_EQ(b[r * d + c], x[r * d + c]);  // exact
      continue;
    }
    for (int64_t c = 0; c < d; ++c) {
      err_kivi += std::fabs(a[r * d + c] - x[r * d + c]);
      err_sink += std::fabs(b[r * d + c] - x[r * d + c]);
    }
  }
  EXPECT_LT(err_sink * 4, err_kivi) << err_sink << " vs " << err_kivi;
}

TEST(KiviSinkCache, SinksAreNeverDisplacedAndFreeSlotsFillLater) {
  const int64_t d = 16, group = 8;
  const lm::Tensor k = keys_with_sinks(1, 32, d, 21, {2, 20}, 10.0f);
  const lm::Tensor v = test_support::random_kv(1, 1, 32, d, 22, lm::DType::F32);
  KiviCache cache(d, 2, group, 0, sink_variant(3));
  cache.update_and_fetch(test_support::token_rows(k, 0, 8), test_support::token_rows(v, 0, 8));
  // The first group fills all three slots (row 2 and its two next strongest rows).
  ASSERT_EQ(cache.sinks().count(0), 3);
  EXPECT_TRUE(cache.sinks().is_sink(0, 2));
  cache.update_and_fetch(test_support::token_rows(k, 8, 32), test_support::token_rows(v, 8, 32));
  EXPECT_FALSE(cache.sinks().is_sink(0, 20));  // stronger, but every slot was taken
  EXPECT_EQ(cache.sinks().count(0), 3);
}

TEST(KiviSinkCache, FusedAttentionUsesTheExactSinkRows) {
  // Sinks with 20x keys dominate the softmax: scoring them from their neutralized codes would be
  // far off. 2-bit planar codes, GQA 3, sinks in the quantized region and in the tail; f32 rows.
  const int64_t heads = 2, hq = 6, d = 64;
  KiviCache fused(d, 2, 32, 16, sink_variant(3)), plain(d, 2, 32, 16, sink_variant(3));
  int64_t first = 0;
  uint64_t seed = 400;
  for (int64_t n : {150, 17, 1, 1}) {
    const lm::Tensor k = keys_with_sinks(heads, n, d, seed++, {n / 3, n - 1}, 20.0f);
    const lm::Tensor v = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32);
    const lm::Tensor q = test_support::random_kv(1, hq, n, d, seed++, lm::DType::F32);
    lm::Tensor out({1, hq, n, d}, lm::DType::F32);
    fused.fused_attention({&q, &k, &v, 0.02f, std::nullopt}, out);
    const std::vector<float> want =
        test_support::reference_attention(plain.update_and_fetch(k, v), q.to_f32(), hq, n, first, 0.02f);
    const std::vector<float> got = out.to_f32();
    float worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LE(worst, 1e-3f) << "chunk " << n;
    first += n;
  }
  EXPECT_EQ(fused.sinks().count(0), 3);
}

TEST(KiviSinkCache, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  auto cache = std::make_unique<KiviCache>(d, 2, 32, 128, sink_variant(5));
  for (int i = 0; i < 5; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  ASSERT_EQ(cache->frontier(), 352);
  const std::size_t rows = 512, heads = b * h;
  const std::size_t kivi = heads * rows * (d / 16) * 4 * 2    // 2-bit key and value codes
                           + heads * (rows / 32) * 2 * d * 2  // key (scale, min) per channel per group
                           + heads * rows * 2 * 2 * 2         // value (scale, min) per channel group
                           + 2 * heads * (128 + 32) * d * 2;  // f16 tail
  const std::size_t sinks = b * 5 * 4                         // i32 positions
                            + 2 * heads * 5 * d * 2;          // f16 key and value rows
  EXPECT_EQ(cache->nbytes(), kivi + sinks);
}

TEST(KiviSinkCache, TrimReturnsSinksAboveTheFrontierExactly) {
  const int64_t d = 16;
  const lm::Tensor k = keys_with_sinks(1, 300, d, 31, {20, 150}, 8.0f);
  const lm::Tensor v = test_support::random_kv(1, 1, 300, d, 32, lm::DType::F32);
  KiviCache cache(d, 2, 32, 128, sink_variant(2));
  cache.update_and_fetch(k, v);
  ASSERT_EQ(cache.frontier(), 160);
  ASSERT_TRUE(cache.sinks().is_sink(0, 150));
  EXPECT_EQ(cache.trim(100), 100);
  EXPECT_EQ(cache.frontier(), 64);
  EXPECT_EQ(cache.sinks().count(0), 1);  // 150 went back to the tail, 20 stays
  EXPECT_TRUE(cache.sinks().is_sink(0, 20));
  const std::vector<float> got = cache
                                     .update_and_fetch(test_support::random_kv(1, 1, 1, d, 33, lm::DType::F32),
                                                       test_support::random_kv(1, 1, 1, d, 34, lm::DType::F32))
                                     .keys.to_f32();
  const std::vector<float> x = k.to_f32();
  for (int64_t c = 0; c < d; ++c) {
    EXPECT_EQ(got[150 * d + c], x[150 * d + c]);
    EXPECT_EQ(got[20 * d + c], x[20 * d + c]);
  }
}

TEST(KiviSinkCache, StateRoundTripThroughTheRegistryPlaceholder) {
  KVCacheConfig c;
  c.method = "kivi_sink";
  c.head_dim = 16;
  c.bit_width_inlier = 3;
  c.kivi.residual_length = 16;
  auto cache = KVCacheBuilder(c).build().serving();
  EXPECT_EQ(cache->type_name(), "KiviSinkCache");
  cache->update_and_fetch(keys_with_sinks(2, 90, 16, 41, {7}, 9.0f).astype(lm::DType::F16),
                          test_support::random_kv(1, 2, 90, 16, 42));
  auto restored = require_method("kivi_sink").make_restorable();
  restored->from_state(cache->state(), cache->meta_state());
  EXPECT_EQ(restored->type_name(), "KiviSinkCache");
  const lm::Tensor k = test_support::random_kv(1, 2, 50, 16, 43), v = test_support::random_kv(1, 2, 50, 16, 44);
  const lm::KeysValues a = cache->update_and_fetch(k, v);
  const lm::KeysValues b = restored->update_and_fetch(k, v);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  std::vector<std::string> meta = cache->meta_state();
  meta[8] = "sideways";
  EXPECT_THROW(restored->from_state(cache->state(), meta), base::FormatError);
}

TEST(KiviSinkCache, BadOptionsNameTheField) {
  KVCacheConfig c;
  c.method = "kivi_sink";
  c.head_dim = 16;
  c.options<KiviSinkOptions>().n_sink_tokens = -1;
  try {
    KVCacheBuilder(c).build();
    FAIL() << "n_sink_tokens=-1 accepted";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n_sink_tokens"), std::string::npos) << e.what();
  }
  c.options<KiviSinkOptions>().n_sink_tokens = 5;
  c.bit_width_inlier = 9;
  EXPECT_THROW(KVCacheBuilder(c).build(), QuantizerConfigError);
}

}  // namespace
}  // namespace veloxquant
