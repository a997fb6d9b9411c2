// zipcache against an independent reference written from its card (docs/methods/zipcache.md):
// every complete group of G tokens of a head is split by key L2 norm (the round(f * G) largest,
// ties to the earlier position, get hi_bits); each tier is KIVI's group code — keys per channel
// over the tier's rows of the group, values per token over channel groups of G — and the
// incomplete last group comes back as it was given.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/caches/zipcache_cache.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

// One head's rows [t, d] of keys and values as the reference quantizes them.
void reference_head(std::vector<float>& keys, std::vector<float>& values, int64_t t, int64_t d, int hi_bits,
                    int lo_bits, double fraction, int64_t group) {
  const int64_t n_hi = std::llround(fraction * static_cast<double>(group));
  for (int64_t g0 = 0; g0 + group <= t; g0 += group) {
    std::vector<std::pair<double, int64_t>> ranked;  // (-norm, row): sorted, the first n_hi are high
    for (int64_t r = 0; r < group; ++r) {
      double norm = 0;
      for (int64_t c = 0; c < d; ++c) norm += double(keys[(g0 + r) * d + c]) * keys[(g0 + r) * d + c];
      ranked.push_back({-norm, r});
    }
    std::sort(ranked.begin(), ranked.end());
    std::vector<bool> high(static_cast<std::size_t>(group), false);
    for (int64_t i = 0; i < n_hi; ++i)
      high[static_cast<std::size_t>(ranked[static_cast<std::size_t>(i)].second)] = true;
    for (bool tier_high : {true, false}) {
      std::vector<int64_t> rows;
      for (int64_t r = 0; r < group; ++r) {
        if (high[static_cast<std::size_t>(r)] == tier_high) rows.push_back(g0 + r);
      }
      if (rows.empty()) continue;
      const int bits = tier_high ? hi_bits : lo_bits;
      for (int64_t c = 0; c < d; ++c) {
        std::vector<float> x;
        x.reserve(rows.size());
        for (int64_t r : rows) x.push_back(keys[r * d + c]);
        const std::vector<float> q = reference_group(x, bits);
        for (std::size_t i = 0; i < rows.size(); ++i) keys[rows[i] * d + c] = q[i];
      }
      for (int64_t r : rows) {
        for (int64_t c0 = 0; c0 < d; c0 += group) {
          const int64_t n = std::min(group, d - c0);
          const std::vector<float> q =
              reference_group({values.begin() + r * d + c0, values.begin() + r * d + c0 + n}, bits);
          std::copy(q.begin(), q.end(), values.begin() + r * d + c0);
        }
      }
    }
  }
}

TEST(ZipCache, MatchesTheReferenceBitExactly) {
  const int64_t heads = 2, d = 16;
  for (const auto& [hi, lo, fraction, group, t] :
       {std::tuple{4, 2, 0.2, 8, 29}, std::tuple{8, 3, 0.5, 4, 16}, std::tuple{3, 1, 0.0, 8, 16},
        std::tuple{5, 2, 1.0, 8, 20}, std::tuple{4, 2, 0.2, 32, 70}}) {
    const lm::Tensor k = test_support::random_kv(1, heads, t, d, 51, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 52, lm::DType::F32);
    ZipCache cache(hi, lo, fraction, group);
    // Two calls: a group completes across them.
    cache.update_and_fetch(test_support::token_rows(k, 0, 3), test_support::token_rows(v, 0, 3));
    const lm::KeysValues got =
        cache.update_and_fetch(test_support::token_rows(k, 3, t), test_support::token_rows(v, 3, t));
    const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32(), kf = k.to_f32(), vf = v.to_f32();
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> rk(kf.begin() + h * t * d, kf.begin() + (h + 1) * t * d);
      std::vector<float> rv(vf.begin() + h * t * d, vf.begin() + (h + 1) * t * d);
      reference_head(rk, rv, t, d, hi, lo, fraction, group);
      EXPECT_EQ(std::vector<float>(gk.begin() + h * t * d, gk.begin() + (h + 1) * t * d), rk)
          << "hi " << hi << " lo " << lo << " fraction " << fraction << " group " << group << " head " << h;
      EXPECT_EQ(std::vector<float>(gv.begin() + h * t * d, gv.begin() + (h + 1) * t * d), rv)
          << "hi " << hi << " lo " << lo << " fraction " << fraction << " group " << group << " head " << h;
    }
  }
}

TEST(ZipCache, HighNormTokensKeepMorePrecision) {
  // The 6 largest-norm rows of a group of 32 get 4 bits: their error is far below what the same
  // rows get when every row is at 2 bits.
  const int64_t d = 32, t = 32;
  const std::vector<float> x = test_support::random_kv(1, 1, t, d, 61, lm::DType::F32).to_f32();
  const lm::Tensor k = lm::Tensor::from_f32(x, {1, 1, t, d}, lm::DType::F32);
  ZipCache mixed(4, 2, 0.2, 32), low(2, 2, 0.2, 32);
  const std::vector<float> a = mixed.update_and_fetch(k, k).keys.to_f32();
  const std::vector<float> b = low.update_and_fetch(k, k).keys.to_f32();
  std::vector<std::pair<double, int64_t>> ranked;
  for (int64_t r = 0; r < t; ++r) {
    double norm = 0;
    for (int64_t c = 0; c < d; ++c) norm += double(x[r * d + c]) * x[r * d + c];
    ranked.push_back({-norm, r});
  }
  std::sort(ranked.begin(), ranked.end());
  double ea = 0, eb = 0;
  for (int i = 0; i < 6; ++i) {
    const int64_t r = ranked[static_cast<std::size_t>(i)].second;
    for (int64_t c = 0; c < d; ++c) {
      ea += std::fabs(a[r * d + c] - x[r * d + c]);
      eb += std::fabs(b[r * d + c] - x[r * d + c]);
    }
  }
  EXPECT_LT(ea * 3, eb);
  EXPECT_EQ(mixed.rows_per_block(0), 6);
  EXPECT_DOUBLE_EQ(mixed.assigned_avg_bits(), (6 * 4 + 26 * 2) / 32.0);
}

TEST(ZipCache, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "zipcache";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 4 / 2 bits, 20% of 32 -> 6 high rows
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 tokens: 9 groups quantized in a 512-token region (16 blocks), 12 rows in the 32-row tail.
  const std::size_t heads = b * h, blocks = 16;
  const std::size_t hi_rows = blocks * 6, lo_rows = blocks * 26;
  const std::size_t codes = 2 * heads * (hi_rows * 8 + lo_rows * 4) * 4;     // 4-bit: 8 words, 2-bit: 4 words
  const std::size_t key_params = 2 * heads * blocks * 2 * d * 2;             // per tier, per block, per channel
  const std::size_t value_params = heads * (hi_rows + lo_rows) * 2 * 2 * 2;  // 2 groups of 32 channels
  const std::size_t positions = heads * (hi_rows + lo_rows) * 4;
  const std::size_t tail = 2 * heads * 32 * d * 2;
  EXPECT_EQ(cache->nbytes(), codes + key_params + value_params + positions + tail);
}

TEST(ZipCache, FusedAttentionEqualsAttentionOverFetchedRows) {
  // D = 64: 2- and 4-bit rows read by planes, 3-bit by words; GQA 3; a prefill then decode steps.
  const int64_t heads = 2, hq = 6, d = 64;
  for (const auto& [hi, lo] : {std::pair{4, 2}, std::pair{3, 2}, std::pair{8, 4}}) {
    ZipCache fused(hi, lo, 0.2, 32), plain(hi, lo, 0.2, 32);
    const std::vector<int64_t> chunks{150, 17, 1, 1};
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 300);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      // Plain 2-, 4- and 8-bit tiers score their keys as integers with the query rounded to 16
      // bits (attention/integer_key_scores.h): ~1e-4 relative on these outputs of magnitude ~13.
      EXPECT_LE(worst[c], 2e-3f) << "hi " << hi << " lo " << lo << " chunk " << chunks[c];
    }
  }
}

TEST(ZipCache, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(ZipCacheOptions&)>& change) {
    return test_support::option_error("zipcache", change);
  };
  EXPECT_NE(message([](ZipCacheOptions& o) { o.zipcache_hi_bits = 9; }).find("zipcache_hi_bits"), std::string::npos);
  EXPECT_NE(message([](ZipCacheOptions& o) { o.zipcache_lo_bits = 0; }).find("zipcache_lo_bits"), std::string::npos);
  EXPECT_NE(message([](ZipCacheOptions& o) { o.zipcache_lo_bits = 6; }).find("must not exceed zipcache_hi_bits"),
            std::string::npos);
  EXPECT_NE(message([](ZipCacheOptions& o) { o.zipcache_hi_fraction = 1.5; }).find("zipcache_hi_fraction"),
            std::string::npos);
  EXPECT_NE(message([](ZipCacheOptions& o) { o.zipcache_group_size = 0; }).find("zipcache_group_size"),
            std::string::npos);
  KVCacheConfig c;
  c.method = "zipcache";
  c.head_dim = 16;
  c.options<ZipCacheOptions>().zipcache_quantize_values = false;
  try {
    KVCacheBuilder(c).build();
    FAIL() << "zipcache_quantize_values=false accepted";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("zipcache_quantize_values"), std::string::npos);
  }
}

}  // namespace
}  // namespace veloxquant
