// kitty against an independent reference written from its card (docs/methods/kitty.md): every
// complete block of G tokens of a head ranks its key channels by variance over the block (the
// round(f * Dk) largest, ties to the lower channel, are high), each channel is KIVI's group code
// over the block's tokens at hi or lo bits; values and the incomplete block come back as given.
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
#include "veloxquant/caches/kitty_cache.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

// One head's keys [t, d] as the reference quantizes them; returns each block's high channels.
std::vector<std::vector<bool>> reference_keys(std::vector<float>& keys, int64_t t, int64_t d, double fraction, int hi,
                                              int lo, int64_t group) {
  const int64_t n_hi = std::llround(fraction * static_cast<double>(d));
  std::vector<std::vector<bool>> high_sets;
  for (int64_t g0 = 0; g0 + group <= t; g0 += group) {
    std::vector<std::pair<double, int64_t>> ranked;  // (-variance, channel): the first n_hi are high
    for (int64_t c = 0; c < d; ++c) {
      double mean = 0;
      for (int64_t r = g0; r < g0 + group; ++r) mean += keys[r * d + c];
      mean /= static_cast<double>(group);
      double var = 0;
      for (int64_t r = g0; r < g0 + group; ++r) var += (keys[r * d + c] - mean) * (keys[r * d + c] - mean);
      ranked.push_back({-var, c});
    }
    std::sort(ranked.begin(), ranked.end());
    std::vector<bool> high(static_cast<std::size_t>(d), false);
    for (int64_t i = 0; i < n_hi; ++i)
      high[static_cast<std::size_t>(ranked[static_cast<std::size_t>(i)].second)] = true;
    for (int64_t c = 0; c < d; ++c) {
      std::vector<float> x;
      for (int64_t r = g0; r < g0 + group; ++r) x.push_back(keys[r * d + c]);
      const std::vector<float> q = reference_group(x, high[static_cast<std::size_t>(c)] ? hi : lo);
      for (int64_t r = g0; r < g0 + group; ++r) keys[r * d + c] = q[static_cast<std::size_t>(r - g0)];
    }
    high_sets.push_back(high);
  }
  return high_sets;
}

TEST(Kitty, MatchesTheReferenceBitExactly) {
  const int64_t heads = 2;
  for (const auto& [fraction, hi, lo, group, t, d] :
       {std::tuple{0.25, 4, 2, 8, 29, 16}, std::tuple{0.5, 8, 3, 4, 16, 16}, std::tuple{0.0, 4, 1, 8, 16, 16},
        std::tuple{1.0, 5, 2, 8, 20, 16}, std::tuple{0.25, 4, 2, 32, 70, 40}}) {
    std::vector<float> kf = test_support::random_kv(1, heads, t, d, 41, lm::DType::F32).to_f32();
    // Channel c of head h scaled by 1 + ((c * 5 + h) % 7): variances differ by channel, as in real keys.
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t c = 0; c < d; ++c)
          kf[static_cast<std::size_t>((h * t + r) * d + c)] *= 1.0f + float((c * 5 + h) % 7);
      }
    }
    const lm::Tensor k = lm::Tensor::from_f32(kf, {1, heads, t, d}, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 42, lm::DType::F32);
    KittyCache cache(fraction, hi, lo, group);
    cache.update_and_fetch(test_support::token_rows(k, 0, 3), test_support::token_rows(v, 0, 3));
    const lm::KeysValues got =
        cache.update_and_fetch(test_support::token_rows(k, 3, t), test_support::token_rows(v, 3, t));
    const std::vector<float> gk = got.keys.to_f32();
    EXPECT_EQ(got.values.to_f32(), v.to_f32()) << "values are kept as given";
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> rk(kf.begin() + h * t * d, kf.begin() + (h + 1) * t * d);
      const auto high = reference_keys(rk, t, d, fraction, hi, lo, group);
      EXPECT_EQ(std::vector<float>(gk.begin() + h * t * d, gk.begin() + (h + 1) * t * d), rk)
          << "fraction " << fraction << " hi " << hi << " lo " << lo << " group " << group << " head " << h;
      for (std::size_t g = 0; g < high.size(); ++g) {
        for (int64_t c = 0; c < d; ++c) {
          EXPECT_EQ(cache.is_high(0, h, static_cast<int64_t>(g), c), high[g][static_cast<std::size_t>(c)]);
        }
      }
    }
  }
}

TEST(Kitty, HighVarianceChannelsKeepMorePrecision) {
  // 4 of 16 channels carry 8x the spread: at 4 bits their error is far below 2-bit everywhere.
  const int64_t d = 16, t = 32;
  std::vector<float> x = test_support::random_kv(1, 1, t, d, 43, lm::DType::F32).to_f32();
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c : {1, 6, 9, 14}) x[static_cast<std::size_t>(r * d + c)] *= 8.0f;
  }
  const lm::Tensor k = lm::Tensor::from_f32(x, {1, 1, t, d}, lm::DType::F32);
  KittyCache mixed(0.25, 4, 2, 32), low(0.25, 2, 2, 32);
  const std::vector<float> a = mixed.update_and_fetch(k, k).keys.to_f32();
  const std::vector<float> b = low.update_and_fetch(k, k).keys.to_f32();
  double ea = 0, eb = 0;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c : {1, 6, 9, 14}) {
      EXPECT_TRUE(mixed.is_high(0, 0, 0, c));
      ea += std::fabs(a[static_cast<std::size_t>(r * d + c)] - x[static_cast<std::size_t>(r * d + c)]);
      eb += std::fabs(b[static_cast<std::size_t>(r * d + c)] - x[static_cast<std::size_t>(r * d + c)]);
    }
  }
  EXPECT_LT(ea * 3, eb);
  EXPECT_DOUBLE_EQ(mixed.assigned_avg_bits(), (4 * 4 + 12 * 2) / 16.0);
}

TEST(Kitty, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "kitty";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 16 of 64 channels at 4 bits, 48 at 2, G 32
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 tokens in a 512-row region (16 blocks); f16 inputs.
  const std::size_t heads = b * h, rows = 512, blocks = 16;
  const std::size_t codes = heads * rows * (2 + 3) * 4;  // 16 x 4 bits = 2 words, 48 x 2 bits = 3 words
  const std::size_t params = heads * blocks * 2 * d * 2;
  const std::size_t mask = heads * blocks * 2 * 4;
  const std::size_t values = heads * rows * d * 2;
  const std::size_t tail = heads * 32 * d * 2;
  EXPECT_EQ(cache->nbytes(), codes + params + mask + values + tail);
}

TEST(Kitty, TrimReopensTheLastBlockFromItsCodes) {
  // Trimmed to 23 rows, a cache of 40 keeps blocks 0 and 1 and reopens block 2 with 7 rows, whose
  // keys come back decoded: it then behaves exactly as a cache fed rows 0..15 as they were and
  // rows 16..22 as the first cache decoded them.
  const int64_t heads = 2, d = 16, t = 40, group = 8, keep = 23;
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 44, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 45, lm::DType::F32);
  KittyCache full(0.25, 4, 2, group);
  const std::vector<float> decoded = full.update_and_fetch(k, v).keys.to_f32();
  EXPECT_EQ(full.trim(t - keep), t - keep);
  EXPECT_EQ(full.offset(), keep);
  EXPECT_EQ(full.frontier(), 16);
  std::vector<float> fed = test_support::token_rows(k, 0, keep).to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 16; r < keep; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        fed[static_cast<std::size_t>((h * keep + r) * d + c)] = decoded[static_cast<std::size_t>((h * t + r) * d + c)];
      }
    }
  }
  KittyCache fresh(0.25, 4, 2, group);
  fresh.update_and_fetch(lm::Tensor::from_f32(fed, {1, heads, keep, d}, lm::DType::F32),
                         test_support::token_rows(v, 0, keep));
  const lm::Tensor next_k = test_support::random_kv(1, heads, 9, d, 46, lm::DType::F32);
  const lm::Tensor next_v = test_support::random_kv(1, heads, 9, d, 47, lm::DType::F32);
  const lm::KeysValues a = full.update_and_fetch(next_k, next_v);
  const lm::KeysValues b = fresh.update_and_fetch(next_k, next_v);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(full.nbytes(), fresh.nbytes());
}

TEST(Kitty, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6, d = 64;
  for (const auto& [fraction, hi, lo] :
       {std::tuple{0.25, 4, 2}, std::tuple{0.5, 3, 2}, std::tuple{0.0, 8, 4}, std::tuple{1.0, 4, 1}}) {
    KittyCache fused(fraction, hi, lo, 32), plain(fraction, hi, lo, 32);
    const std::vector<int64_t> chunks{150, 17, 1, 1};
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 600);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      EXPECT_LE(worst[c], 1e-3f) << "fraction " << fraction << " hi " << hi << " lo " << lo << " chunk " << chunks[c];
    }
  }
}

TEST(Kitty, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(KittyOptions&)>& change) {
    return test_support::option_error("kitty", change);
  };
  EXPECT_NE(message([](KittyOptions& o) { o.kitty_hi_fraction = -0.1; }).find("kitty_hi_fraction"), std::string::npos);
  EXPECT_NE(message([](KittyOptions& o) { o.kitty_hi_bit = 9; }).find("kitty_hi_bit"), std::string::npos);
  EXPECT_NE(message([](KittyOptions& o) { o.kitty_lo_bit = 0; }).find("kitty_lo_bit"), std::string::npos);
  EXPECT_NE(message([](KittyOptions& o) { o.kitty_lo_bit = 6; }).find("must not exceed kitty_hi_bit"),
            std::string::npos);
  EXPECT_NE(message([](KittyOptions& o) { o.kitty_group_size = 0; }).find("kitty_group_size"), std::string::npos);
  EXPECT_EQ(message([](KittyOptions& o) { o.kitty_hi_fraction = 0.5; }), "accepted");
}

}  // namespace
}  // namespace veloxquant
