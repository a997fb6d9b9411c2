// adakv against an independent reference written from its card (docs/methods/adakv.md): every
// complete block of G tokens gets per-head widths — tier counts with the largest bit sum not
// above target * H (ties: fewer hi), heads ranked by the variance of their key norms over the
// window's blocks (larger first, ties to the lower head), widths reused inside an update
// interval — and each head's keys are KIVI's per-channel group code over the block, its values
// KIVI's per-token code over channel groups of G, at that width. Blocks are flushed once they
// leave the residual window of R tokens (frontier floor(max(0, T - R) / G) * G); the rest is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/caches/adakv_cache.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

struct Reference {
  std::vector<float> keys, values;     // [H, T, D] as a reader gets them back
  std::vector<std::vector<int>> bits;  // [block][head]
};

Reference reference(const std::vector<float>& k, const std::vector<float>& v, int64_t heads, int64_t t, int64_t d,
                    const AdaKVOptions& o) {
  const int64_t g = o.adakv_group_size, blocks = std::max<int64_t>(0, t - o.adakv_residual_length) / g;
  const std::array<int, 3> width{o.adakv_hi_bit, o.adakv_mid_bit, o.adakv_lo_bit};
  // Tier counts: the largest bit sum within target * H; at equal sums the fewest hi heads.
  std::array<int64_t, 3> counts{0, 0, heads};
  int64_t best = -1;
  for (int64_t hi = 0; hi <= heads; ++hi) {
    for (int64_t mid = 0; hi + mid <= heads; ++mid) {
      const int64_t sum = hi * width[0] + mid * width[1] + (heads - hi - mid) * width[2];
      if (sum <= o.adakv_target_avg_bits * heads + 1e-9 && sum > best) best = sum, counts = {hi, mid, heads - hi - mid};
    }
  }
  Reference out{k, v, {}};
  std::vector<std::vector<std::pair<float, float>>> stats(static_cast<std::size_t>(heads));
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int64_t h = 0; h < heads; ++h) {
      double s1 = 0, s2 = 0;
      for (int64_t r = blk * g; r < (blk + 1) * g; ++r) {
        double n2 = 0;
        for (int64_t c = 0; c < d; ++c) n2 += double(k[(h * t + r) * d + c]) * k[(h * t + r) * d + c];
        s1 += std::sqrt(n2);
        s2 += n2;
      }
      stats[static_cast<std::size_t>(h)].push_back({float(s1), float(s2)});
    }
    std::vector<int> bits(static_cast<std::size_t>(heads));
    if (blk % o.adakv_update_interval != 0) {
      bits = out.bits[static_cast<std::size_t>(blk - blk % o.adakv_update_interval)];
    } else {
      const int64_t first = std::max<int64_t>(0, blk - (o.adakv_obs_window + g - 1) / g + 1);
      std::vector<std::pair<double, int64_t>> ranked;  // (-variance, head)
      for (int64_t h = 0; h < heads; ++h) {
        double s1 = 0, s2 = 0;
        for (int64_t x = first; x <= blk; ++x) {
          s1 += stats[static_cast<std::size_t>(h)][static_cast<std::size_t>(x)].first;
          s2 += stats[static_cast<std::size_t>(h)][static_cast<std::size_t>(x)].second;
        }
        const double n = double((blk - first + 1) * g), mean = s1 / n;
        ranked.push_back({-(s2 / n - mean * mean), h});
      }
      std::sort(ranked.begin(), ranked.end());
      for (int64_t i = 0; i < heads; ++i) {
        bits[static_cast<std::size_t>(ranked[static_cast<std::size_t>(i)].second)] =
            width[i < counts[0] ? 0 : (i < counts[0] + counts[1] ? 1 : 2)];
      }
    }
    out.bits.push_back(bits);
    for (int64_t h = 0; h < heads; ++h) {
      const int b = bits[static_cast<std::size_t>(h)];
      for (int64_t c = 0; c < d; ++c) {
        std::vector<float> x;
        for (int64_t r = blk * g; r < (blk + 1) * g; ++r) x.push_back(k[(h * t + r) * d + c]);
        const std::vector<float> q = reference_group(x, b);
        for (int64_t r = blk * g; r < (blk + 1) * g; ++r)
          out.keys[(h * t + r) * d + c] = q[static_cast<std::size_t>(r - blk * g)];
      }
      for (int64_t r = blk * g; r < (blk + 1) * g; ++r) {
        for (int64_t c0 = 0; c0 < d; c0 += g) {
          const int64_t c1 = std::min(d, c0 + g);
          std::vector<float> x(v.begin() + (h * t + r) * d + c0, v.begin() + (h * t + r) * d + c1);
          const std::vector<float> q = reference_group(x, b);
          std::copy(q.begin(), q.end(), out.values.begin() + (h * t + r) * d + c0);
        }
      }
    }
  }
  return out;
}

// Keys whose token norms vary more for higher heads (head h's rows scaled by 1 + h * wave).
lm::Tensor spread_keys(int64_t heads, int64_t t, int64_t d, uint64_t seed) {
  std::vector<float> x = test_support::random_kv(1, heads, t, d, seed, lm::DType::F32).to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < t; ++r) {
      const float scale = 1.0f + 0.6f * float(h) * float((r * 7 + h) % 5);
      for (int64_t c = 0; c < d; ++c) x[static_cast<std::size_t>((h * t + r) * d + c)] *= scale;
    }
  }
  return lm::Tensor::from_f32(x, {1, heads, t, d}, lm::DType::F32);
}

AdaKVOptions options(double target, int lo, int mid, int hi, int group, int interval, int window, int residual = 0) {
  AdaKVOptions o;
  o.adakv_target_avg_bits = target;
  o.adakv_lo_bit = lo;
  o.adakv_mid_bit = mid;
  o.adakv_hi_bit = hi;
  o.adakv_group_size = group;
  o.adakv_update_interval = interval;
  o.adakv_obs_window = window;
  o.adakv_residual_length = residual;
  return o;
}

TEST(AdaKV, TierCountsHitTheTargetWithoutExceedingIt) {
  EXPECT_EQ(adakv_tier_counts(3, 2.5, 2, 3, 4), (std::array<int64_t, 3>{0, 1, 2}));  // 7 bits: 2.33
  EXPECT_EQ(adakv_tier_counts(4, 2.5, 2, 3, 4), (std::array<int64_t, 3>{0, 2, 2}));  // 10 = (1, 0, 3) too: fewer hi
  EXPECT_EQ(adakv_tier_counts(2, 3.0, 2, 3, 4), (std::array<int64_t, 3>{0, 2, 0}));
  EXPECT_EQ(adakv_tier_counts(8, 3.5, 2, 3, 4), (std::array<int64_t, 3>{4, 4, 0}));
  EXPECT_EQ(adakv_tier_counts(5, 4.0, 2, 3, 4), (std::array<int64_t, 3>{5, 0, 0}));
  EXPECT_EQ(adakv_tier_counts(5, 2.0, 2, 3, 4), (std::array<int64_t, 3>{0, 0, 5}));
}

TEST(AdaKV, MatchesTheReferenceBitExactly) {
  for (const auto& [heads, t, d, o] :
       {std::tuple{int64_t{3}, int64_t{70}, int64_t{16}, options(2.5, 2, 3, 4, 8, 1, 8)},
        std::tuple{int64_t{4}, int64_t{61}, int64_t{24}, options(2.5, 2, 3, 4, 8, 2, 20)},
        std::tuple{int64_t{5}, int64_t{100}, int64_t{64}, options(3.4, 1, 3, 8, 32, 1, 32)},
        std::tuple{int64_t{2}, int64_t{40}, int64_t{16}, options(2.0, 2, 2, 2, 4, 3, 5)},
        std::tuple{int64_t{3}, int64_t{90}, int64_t{16}, options(2.5, 2, 3, 4, 8, 1, 16, 13)},
        std::tuple{int64_t{3}, int64_t{200}, int64_t{64}, AdaKVOptions{}}}) {
    const lm::Tensor k = spread_keys(heads, t, d, 51);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 52, lm::DType::F32);
    AdaKVCache cache(o);
    cache.update_and_fetch(test_support::token_rows(k, 0, 5), test_support::token_rows(v, 0, 5));
    cache.update_and_fetch(test_support::token_rows(k, 5, 6), test_support::token_rows(v, 5, 6));
    const lm::KeysValues got =
        cache.update_and_fetch(test_support::token_rows(k, 6, t), test_support::token_rows(v, 6, t));
    const Reference want = reference(k.to_f32(), v.to_f32(), heads, t, d, o);
    EXPECT_EQ(got.keys.to_f32(), want.keys) << "heads " << heads << " group " << o.adakv_group_size;
    EXPECT_EQ(got.values.to_f32(), want.values) << "heads " << heads << " group " << o.adakv_group_size;
    for (std::size_t blk = 0; blk < want.bits.size(); ++blk) {
      for (int64_t h = 0; h < heads; ++h) {
        EXPECT_EQ(cache.width(0, h, static_cast<int64_t>(blk)), want.bits[blk][static_cast<std::size_t>(h)]);
      }
    }
  }
}

TEST(AdaKV, AverageWidthHitsTheTargetAndVariableHeadsGetMore) {
  const int64_t heads = 4, t = 256, d = 32;
  const AdaKVOptions o = options(2.5, 2, 3, 4, 32, 1, 32);
  const lm::Tensor k = spread_keys(heads, t, d, 53);
  AdaKVCache cache(o);
  cache.update_and_fetch(k, test_support::random_kv(1, heads, t, d, 54, lm::DType::F32));
  EXPECT_DOUBLE_EQ(cache.assigned_avg_bits(), 2.5);
  for (int64_t blk = 0; blk < t / 32; ++blk) {
    int sum = 0;
    for (int64_t h = 0; h < heads; ++h) sum += cache.width(0, h, blk);
    EXPECT_EQ(sum, 10) << "block " << blk;
    // Head 0's norms are the flattest, head 3's the most variable.
    EXPECT_EQ(cache.width(0, 0, blk), 2);
    EXPECT_EQ(cache.width(0, 3, blk), 3);
    EXPECT_GE(cache.width(0, 3, blk), cache.width(0, 1, blk));
  }
  AdaKVCache three(o);
  three.update_and_fetch(spread_keys(3, 64, d, 55), test_support::random_kv(1, 3, 64, d, 56, lm::DType::F32));
  EXPECT_DOUBLE_EQ(three.assigned_avg_bits(), 7.0 / 3.0);
}

TEST(AdaKV, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t heads = 3, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "adakv";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 1 head at 3 bits, 2 at 2, G 32, R 128
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(1, heads, 100, d, i),
                            test_support::random_kv(1, heads, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 160 quantized rows in a 256-row region (8 blocks); 140 rows in the f16 tails of 160 rows.
  const std::size_t rows = 256, blocks = 8;
  const std::size_t words3 = core::packed_words(64, 3), words2 = core::packed_words(64, 2);
  EXPECT_EQ(words3, 7u);
  EXPECT_EQ(words2, 4u);
  const std::size_t codes = 2 * rows * (1 * words3 + 2 * words2) * 4;  // keys and values
  const std::size_t key_params = heads * blocks * 2 * d * 2;
  const std::size_t value_params = heads * rows * 2 * 2 * 2;  // 2 channel groups
  const std::size_t tiers = heads * blocks, stats = heads * blocks * 2 * 4;
  const std::size_t tails = 2 * heads * (128 + 32) * d * 2;
  EXPECT_EQ(cache->nbytes(), codes + key_params + value_params + tiers + stats + tails);
}

TEST(AdaKV, TrimReopensBlocksFromTheirCodes) {
  // A cache of 40 rows (G 8) trimmed to `keep` rows rolls its frontier back to
  // floor(max(0, keep - R) / 8) * 8; the rows between the new frontier and the old one come back
  // decoded, in front of the surviving exact tail rows. It then behaves exactly as a cache fed
  // the kept rows as the first one returned them (the norm statistics of the dropped blocks go
  // with them).
  const int64_t heads = 3, d = 16, t = 40;
  for (const auto& [residual, keep, frontier] :
       {std::tuple{0, int64_t{23}, int64_t{16}}, std::tuple{10, int64_t{30}, int64_t{16}},
        std::tuple{3, int64_t{5}, int64_t{0}}}) {
    const AdaKVOptions o = options(2.5, 2, 3, 4, 8, 1, 16, residual);
    const lm::Tensor k = spread_keys(heads, t, d, 57);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 58, lm::DType::F32);
    AdaKVCache full(o);
    const lm::KeysValues decoded = full.update_and_fetch(k, v);
    EXPECT_EQ(full.trim(t - keep), t - keep);
    EXPECT_EQ(full.offset(), keep);
    EXPECT_EQ(full.frontier(), frontier);
    AdaKVCache fresh(o);
    fresh.update_and_fetch(test_support::token_rows(decoded.keys, 0, keep),
                           test_support::token_rows(decoded.values, 0, keep));
    const lm::Tensor next_k = spread_keys(heads, 19, d, 59);
    const lm::Tensor next_v = test_support::random_kv(1, heads, 19, d, 60, lm::DType::F32);
    const lm::KeysValues a = full.update_and_fetch(next_k, next_v);
    const lm::KeysValues b = fresh.update_and_fetch(next_k, next_v);
    EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32()) << "residual " << residual;
    EXPECT_EQ(a.values.to_f32(), b.values.to_f32()) << "residual " << residual;
    EXPECT_EQ(full.nbytes(), fresh.nbytes());
    for (int64_t blk = 0; blk < full.frontier() / 8; ++blk) {
      for (int64_t h = 0; h < heads; ++h) EXPECT_EQ(full.width(0, h, blk), fresh.width(0, h, blk));
    }
  }
}

TEST(AdaKV, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 3, hq = 9, d = 64;
  // Every reading path of a block: integer keys (2, 4, 8 bits), word planes (3, 5, 7 bits), the
  // f32 tile of planar codes the integer kernel does not take (1 bit); values from planes or
  // unpacked words; the residual tail; tiles that straddle blocks of different widths.
  for (const AdaKVOptions& o : {options(2.5, 2, 3, 4, 32, 1, 32), options(5.0, 3, 4, 8, 16, 2, 40, 20), AdaKVOptions{},
                                options(4.34, 1, 5, 7, 16, 1, 16, 5)}) {
    AdaKVCache fused(o), plain(o);
    const std::vector<int64_t> chunks{150, 17, 1, 1};
    const std::vector<float> worst =
        test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 700, spread_keys);
    // Every path, the 2/4/8-bit keys' included (scored with the query in f32, not rounded to 16
    // bits), differs from the fetched rows by summation order only, on keys spread up to 5.8x.
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      EXPECT_LE(worst[c], 1e-3f) << "target " << o.adakv_target_avg_bits << " chunk " << chunks[c];
    }
  }
}

TEST(AdaKV, IntegerKeysMatchTheFloatPathOnUnspreadKeys) {
  // Plain N(0, 1) keys (no spread): the 2- and 4-bit integer keys within KIVI's tolerance.
  const int64_t heads = 3, hq = 9, d = 64;
  AdaKVCache fused(options(2.5, 2, 3, 4, 32, 1, 32)), plain(options(2.5, 2, 3, 4, 32, 1, 32));
  const std::vector<int64_t> chunks{150, 17, 1, 1};
  const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 700);
  for (std::size_t c = 0; c < chunks.size(); ++c) EXPECT_LE(worst[c], 2e-3f) << "chunk " << chunks[c];
}

TEST(AdaKV, StateRoundTrips) {
  const int64_t heads = 3, d = 16;
  const AdaKVOptions o = options(2.5, 2, 3, 4, 8, 1, 16);
  AdaKVCache a(o);
  a.update_and_fetch(spread_keys(heads, 45, d, 61), test_support::random_kv(1, heads, 45, d, 62, lm::DType::F32));
  AdaKVCache b(AdaKVOptions{});
  b.from_state(a.state(), a.meta_state());
  const lm::Tensor k = spread_keys(heads, 12, d, 63), v = test_support::random_kv(1, heads, 12, d, 64, lm::DType::F32);
  EXPECT_EQ(a.update_and_fetch(k, v).keys.to_f32(), b.update_and_fetch(k, v).keys.to_f32());
}

TEST(AdaKV, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(AdaKVOptions&)>& change) {
    return test_support::option_error("adakv", change);
  };
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_lo_bit = 0; }).find("adakv_lo_bit"), std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_hi_bit = 9; }).find("adakv_hi_bit"), std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_mid_bit = 5; }).find("adakv_mid_bit"), std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_target_avg_bits = 4.5; }).find("adakv_target_avg_bits"),
            std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_target_avg_bits = 1.5; }).find("adakv_target_avg_bits"),
            std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_group_size = 0; }).find("adakv_group_size"), std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_obs_window = 0; }).find("adakv_obs_window"), std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_update_interval = 0; }).find("adakv_update_interval"),
            std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_residual_length = -1; }).find("adakv_residual_length"),
            std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_importance = "magic"; }).find("adakv_importance"), std::string::npos);
  EXPECT_NE(message([](AdaKVOptions& o) { o.adakv_importance = "attention_entropy"; }).find("not supported"),
            std::string::npos);
  EXPECT_EQ(message([](AdaKVOptions& o) { o.adakv_target_avg_bits = 3.0; }), "accepted");
}

}  // namespace
}  // namespace veloxquant
