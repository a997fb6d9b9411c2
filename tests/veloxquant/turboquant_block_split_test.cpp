// turboquant_block with a query-aware key split (key_split + scale_format=log8): exact resident
// bytes on SmolLM2's geometry, the calibrated grouping (channels the queries look at and the keys
// vary in get the widest codes), fused attention against dequantize-then-attend (prefill tiles
// decoded, decode tiles scored from the codes), state / trim / clone, and the fields' errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

lm::Tensor random_rows(int64_t heads, int64_t tokens, int64_t dim, uint64_t seed, float offset = 0.0f,
                       float loud = 1.0f) {
  // Rows with a per-channel offset (what mean smoothing removes) and channel spreads that differ
  // (channels 32..63 twice as wide as 0..31, channel 5 `loud` times more), so the split has
  // something to sort.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(heads * tokens * dim));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto e = static_cast<int64_t>(i % static_cast<std::size_t>(dim));
    x[i] = offset * std::cos(0.7f * static_cast<float>(e)) +
           (e >= 32 ? 2.0f : 1.0f) * (e == 5 ? loud : 1.0f) * normal(rng);
  }
  return lm::Tensor::from_f32(x, {1, heads, tokens, dim}, lm::DType::F32);
}

TurboQuantBlockCache::Settings split_settings(const std::string& split = "32:4,16:3,16:2") {
  TurboQuantBlockCache::Settings s;
  s.head_dim = 64;
  s.key_bits = 3;
  s.value_bits = 3;
  s.seed = 17;
  s.value_block = 64;
  s.mean_rows = 256;
  s.sink_rows = 1;
  s.key_mean_segment = 256;
  s.key_split = split;
  s.scale_format = "log8";
  return s;
}

// Brute-force causal attention over fetched rows (double softmax). keys/values [1, H, T, D];
// queries [1, Hq, n, D] at positions first..first+n-1.
std::vector<float> brute_attention(const lm::KeysValues& kv, const std::vector<float>& q, int64_t hq, int64_t n,
                                   int64_t first, float scale) {
  const int64_t h = kv.keys.dim(1), t = kv.keys.dim(2), d = kv.keys.dim(3);
  const std::vector<float> k = kv.keys.to_f32(), v = kv.values.to_f32();
  std::vector<float> out(static_cast<std::size_t>(hq * n * d), 0.0f);
  for (int64_t qh = 0; qh < hq; ++qh) {
    const int64_t kh = qh / (hq / h);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t visible = std::min(t, first + i + 1);
      std::vector<double> w(static_cast<std::size_t>(visible));
      double top = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < d; ++e) {
          dot += double(q[static_cast<std::size_t>((qh * n + i) * d + e)]) *
                 k[static_cast<std::size_t>((kh * t + j) * d + e)];
        }
        w[static_cast<std::size_t>(j)] = dot * scale;
        top = std::max(top, w[static_cast<std::size_t>(j)]);
      }
      for (double& x : w) sum += (x = std::exp(x - top));
      for (int64_t j = 0; j < visible; ++j) {
        for (int64_t e = 0; e < d; ++e) {
          out[static_cast<std::size_t>((qh * n + i) * d + e)] += static_cast<float>(
              w[static_cast<std::size_t>(j)] / sum * v[static_cast<std::size_t>((kh * t + j) * d + e)]);
        }
      }
    }
  }
  return out;
}

TEST(TurboQuantBlockSplit, BytesOnSmolLM2AreTheLayout) {
  // Per head and row: keys 32*4/8 + 16*3/8 + 16*2/8 = 26 code bytes + 3 one-byte scales, values
  // 64*3/8 = 24 + 1: 54. Per head once: 2-bit labels (16 bytes), f16 value mean (128), f16 sink
  // key + value (256), f16 key mean per 256-row segment (128 each).
  TurboQuantBlockCache cache(split_settings());
  EXPECT_EQ(cache.bytes_per_row(), 54);
  const lm::Tensor k = random_rows(3, 2048, 64, 1, 4.0f), v = random_rows(3, 2048, 64, 2);
  const lm::Tensor q = random_rows(9, 512, 64, 3);
  cache.observe_queries(q);
  cache.update_and_fetch(k, v);
  const int64_t per_head = 2048 * 54 + 16 + 128 + 256 + 8 * 128;
  EXPECT_EQ(static_cast<int64_t>(cache.nbytes()), 3 * per_head);
  // 30 layers x 3 heads, per token at 2048: 4922.578125 bytes (q3 today: 4921.875).
  EXPECT_DOUBLE_EQ(30.0 * static_cast<double>(cache.nbytes()) / 2048.0, 4922.578125);
  // At 256 rows (one growth step): 30 * 3 * (256 * 54 + 16 + 128 + 256 + 128) / 256 = 5045.625.
  TurboQuantBlockCache small(split_settings());
  small.update_and_fetch(random_rows(3, 256, 64, 4, 4.0f), random_rows(3, 256, 64, 5));
  EXPECT_EQ(static_cast<int64_t>(small.nbytes()), 3 * (256 * 54 + 16 + 128 + 256 + 128));
}

TEST(TurboQuantBlockSplit, QueriedVaryingChannelsGetTheWidestCodes) {
  // Queries that only look at channels 0..31 (and keys equally spread there) put those in the
  // 4-bit group; the loud channel 5 is among them. Without queries, the keys' variance alone
  // decides: the 32 widest-spread channels (32..63) get 4 bits.
  TurboQuantBlockCache::Settings s = split_settings("32:4,32:2");
  s.sink_rows = 0;
  s.key_mean_segment = 0;
  auto labels_of = [&](bool with_queries) {
    TurboQuantBlockCache cache(s);
    std::vector<float> q(static_cast<std::size_t>(2 * 100 * 64), 0.0f);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = (i % 64) < 32 ? 1.0f + 0.01f * static_cast<float>(i % 7) : 0.0f;
    if (with_queries) cache.observe_queries(lm::Tensor::from_f32(q, {1, 2, 100, 64}, lm::DType::F32));
    EXPECT_EQ(cache.wants_queries(), true);
    cache.update_and_fetch(random_rows(1, 100, 64, 7, 0.0f, 1.0f), random_rows(1, 100, 64, 8));
    EXPECT_EQ(cache.wants_queries(), false);
    const std::vector<lm::Tensor> state = cache.state();
    const std::vector<uint8_t> packed(state.back().data<uint8_t>(), state.back().data<uint8_t>() + 16);
    std::vector<int> label(64);
    for (int c = 0; c < 64; ++c)
      label[static_cast<std::size_t>(c)] = (packed[static_cast<std::size_t>(c / 4)] >> (2 * (c % 4))) & 3;
    return label;
  };
  const std::vector<int> queried = labels_of(true), plain = labels_of(false);
  for (int c = 0; c < 64; ++c) {
    EXPECT_EQ(queried[static_cast<std::size_t>(c)], c < 32 ? 0 : 1) << "channel " << c << " with queries";
    EXPECT_EQ(plain[static_cast<std::size_t>(c)], c < 32 ? 1 : 0) << "channel " << c << " by variance";
  }
}

TEST(TurboQuantBlockSplit, KeysAreCodedAtTheirGroupsWidths) {
  // The split codes 32 channels at 4 bits: its key error lies between uniform 2- and 4-bit
  // turboquant_block codes, and the queried channels (group 0) carry far less error than the rest.
  TurboQuantBlockCache::Settings s = split_settings("32:4,32:2");
  s.mean_rows = 0;
  s.sink_rows = 0;
  s.key_mean_segment = 0;
  TurboQuantBlockCache cache(s);
  std::vector<float> q(static_cast<std::size_t>(2 * 50 * 64), 0.0f);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = (i % 64) >= 32 ? 1.0f : 0.0f;
  cache.observe_queries(lm::Tensor::from_f32(q, {1, 2, 50, 64}, lm::DType::F32));
  const lm::Tensor k = random_rows(1, 400, 64, 9), v = random_rows(1, 400, 64, 10);
  const std::vector<float> got = cache.update_and_fetch(k, v).keys.to_f32(), want = k.to_f32();
  double err[2] = {0, 0}, energy[2] = {0, 0};
  for (std::size_t i = 0; i < got.size(); ++i) {
    const int half = (i % 64) >= 32 ? 1 : 0;
    err[half] += (got[i] - want[i]) * double(got[i] - want[i]);
    energy[half] += double(want[i]) * want[i];
  }
  const double loud = err[1] / energy[1], quiet = err[0] / energy[0];
  EXPECT_LT(loud, 0.02);   // 4-bit Lloyd-Max on a Gaussian block: ~0.01
  EXPECT_GT(quiet, 0.08);  // 2-bit: ~0.12
  EXPECT_LT(quiet, 0.2);
}

TEST(TurboQuantBlockSplit, FusedAttentionEqualsAttentionOverFetchedRows) {
  // Prefill (tiles decoded for many queries), then decode steps (tiles scored from the codes,
  // attention/split_level_key_scores.h; values added from their codes with log8 scales): the
  // same rows update_and_fetch returns. GQA 9 over 3 and 4 over 2; segments of 32 rows.
  for (const std::string split : {"32:4,16:3,16:2", "24:4,40:3", "32:4,32:3"}) {
    for (const int64_t hq : {9, 4}) {
      const int64_t h = hq == 9 ? 3 : 2;
      TurboQuantBlockCache::Settings s = split_settings(split);
      s.mean_rows = 32;
      s.key_mean_segment = 32;
      TurboQuantBlockCache fused(s), plain(s);
      int64_t first = 0;
      uint64_t seed = 100;
      for (int64_t n : {90, 3, 1, 1, 40}) {
        const lm::Tensor k = random_rows(h, n, 64, seed++, 3.0f), v = random_rows(h, n, 64, seed++, 1.0f);
        const lm::Tensor q = random_rows(hq, n, 64, seed++).contiguous();
        // The host's order: queries observed first, then fused attention.
        if (fused.wants_queries()) fused.observe_queries(q);
        if (plain.wants_queries()) plain.observe_queries(q);
        lm::Tensor out({1, hq, n, 64}, lm::DType::F32);
        fused.fused_attention({&q, &k, &v, 0.05f, std::nullopt}, out);
        const std::vector<float> want = brute_attention(plain.update_and_fetch(k, v), q.to_f32(), hq, n, first, 0.05f);
        const std::vector<float> got = out.to_f32();
        double worst = 0.0;
        for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
        EXPECT_LE(worst, 2e-3) << split << ", " << hq << " query heads, chunk of " << n;
        first += n;
      }
    }
  }
}

TEST(TurboQuantBlockSplit, StateTrimAndCloneKeepTheSplit) {
  TurboQuantBlockCache cache(split_settings()), fresh(split_settings());
  const lm::Tensor q = random_rows(9, 300, 64, 20);
  cache.observe_queries(q);
  fresh.observe_queries(q);
  const lm::Tensor k = random_rows(3, 300, 64, 21, 3.0f), v = random_rows(3, 300, 64, 22);
  cache.update_and_fetch(k, v);
  TurboQuantBlockCache restored(8, 1, 1, 0);
  const std::vector<lm::Tensor> state = cache.state();
  restored.from_state(state, cache.meta_state());
  EXPECT_EQ(restored.meta_state(), cache.meta_state());
  auto copy = cache.clone();
  const lm::Tensor k2 = random_rows(3, 20, 64, 23, 3.0f), v2 = random_rows(3, 20, 64, 24);
  const lm::KeysValues a = cache.update_and_fetch(k2, v2), b = restored.update_and_fetch(k2, v2),
                       c = copy->update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(a.keys.to_f32(), c.keys.to_f32());
  // Trim back to 200 rows: the same as a fresh cache fed those rows (same first call).
  cache.trim(120);
  fresh.update_and_fetch(k, v);
  fresh.trim(100);
  const lm::KeysValues x = cache.update_and_fetch(k2, v2), y = fresh.update_and_fetch(k2, v2);
  EXPECT_EQ(x.keys.to_f32(), y.keys.to_f32());
  // Corrupt labels (a group's count wrong) are refused with a FormatError, not a crash.
  std::vector<lm::Tensor> bad = state;
  bad.back() = state.back().clone();
  bad.back().data<uint8_t>()[0] = 0;  // channels 0..3 all to group 0
  bad.back().data<uint8_t>()[1] = 0;
  TurboQuantBlockCache broken(8, 1, 1, 0);
  EXPECT_THROW(broken.from_state(bad, cache.meta_state()), base::FormatError);
}

TEST(TurboQuantBlockSplit, BadFieldsAreNamed) {
  auto expect_error = [](const TurboQuantBlockCache::Settings& s, const std::string& needle) {
    try {
      TurboQuantBlockCache cache(s);
      FAIL() << "accepted " << needle;
    } catch (const QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  TurboQuantBlockCache::Settings s = split_settings();
  s.key_split = "32:4,16:3";
  expect_error(s, "add up to head_dim 64");
  s.key_split = "32:5,32:3";
  expect_error(s, "bits must lie in [1, 4], got 5");
  s.key_split = "30:4,34:3";
  expect_error(s, "multiple of 8, got 30");
  s.key_split = "32-4,32:3";
  expect_error(s, "channels:bits");
  s.key_split = "32:4,,32:3";
  expect_error(s, "channels:bits");
  s.key_split = "16:4,16:4,16:4,8:4,8:4";
  expect_error(s, "at most 4 groups");
  s.key_split = "32:4,32:3";
  s.scale_format = "f16";
  expect_error(s, "needs scale_format=log8");
  s.key_split = "";
  s.scale_format = "log8";
  expect_error(s, "needs key_split");
  s.scale_format = "log9";
  expect_error(s, "'f16' or 'log8', got 'log9'");
  // Through the config (what --set reaches): the same names.
  KVCacheConfig c;
  c.method = "turboquant_block";
  c.head_dim = 64;
  c.turboquant_block.key_split = "32:4,32:9";
  try {
    KVCacheBuilder(c).build();
    FAIL() << "accepted key_split 32:4,32:9";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key_split"), std::string::npos) << e.what();
  }
  c.turboquant_block.key_split = "32:4,32:3";
  c.turboquant_block.scale_format = "log8";
  c.turboquant_block.value_bits = 3;
  auto cache = std::dynamic_pointer_cast<TurboQuantBlockCache>(KVCacheBuilder(c).build().serving());
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->bytes_per_row(), 16 + 12 + 2 + 24 + 2);
}

}  // namespace
}  // namespace veloxquant
