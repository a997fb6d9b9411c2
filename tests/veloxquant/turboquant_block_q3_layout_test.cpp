// turboquant_block's options for the q3 preset's layout (docs/methods/turboquant_block.md,
// "q3's layout"): key_split_rank=objective (channel swaps lower the split's expected score error
// below the product sort's), value_mean=0 (keys smoothed only), sink_values=0 (the sink's value
// read from its codes) and sink_format=q8 (sink rows as rotated 8-bit codes). Exact bytes at
// every growth step, the sink's accuracy, fused attention against attention over the fetched
// rows, state round trips and the fields' errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"
#include "base/half.h"
#include "veloxquant/caches/turboquant_block_split_keys.h"
#include "veloxquant/caches/turboquant_block_split_rows.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

lm::Tensor rows_with_offset(int64_t heads, int64_t tokens, uint64_t seed, float offset, float first_row_gain = 1.0f) {
  // Per-channel offsets and channel spreads that differ, row 0 (the sink) `first_row_gain` times
  // larger than the rest, as a BOS key is.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(heads * tokens * 64));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto e = static_cast<int64_t>(i % 64);
    const auto t = static_cast<int64_t>(i / 64) % tokens;
    x[i] = (t == 0 ? first_row_gain : 1.0f) *
           (offset * std::cos(0.7f * static_cast<float>(e)) + (e >= 32 ? 2.0f : 1.0f) * normal(rng));
  }
  return lm::Tensor::from_f32(x, {1, heads, tokens, 64}, lm::DType::F32);
}

TurboQuantBlockCache::Settings q3_layout() {
  TurboQuantBlockCache::Settings s;
  s.head_dim = 64;
  s.key_bits = 3;
  s.value_bits = 3;
  s.seed = 5;
  s.value_block = 64;
  s.mean_rows = 256;
  s.sink_rows = 1;
  s.key_mean_segment = 256;
  s.key_split = "32:4,32:3";
  s.scale_format = "log8";
  s.key_split_rank = "objective";
  s.value_mean = false;
  s.sink_values = false;
  s.sink_format = "q8";
  return s;
}

// The split's expected score error J for labels (SplitKeyCoder::labels_from_statistics).
double split_objective(const SplitKeyCoder& split, const std::vector<uint8_t>& labels, const std::vector<double>& q,
                       const std::vector<double>& v) {
  std::vector<double> qs(4, 0.0), vs(4, 0.0);
  for (std::size_t c = 0; c < labels.size(); ++c) {
    qs[labels[c]] += q[c];
    vs[labels[c]] += v[c];
  }
  double j = 0.0;
  for (int g = 0; g < split.groups(); ++g) j += split.group_mse(g) / split.group(g).channels * qs[g] * vs[g];
  return j;
}

TEST(TurboQuantBlockQ3Layout, BytesAtEveryGrowthStepStayWithinThreeAndAHalfBits) {
  // Per head and row: keys 32*4/8 + 32*3/8 + 2 one-byte scales = 30, values 24 + 1 = 25. Per head
  // once: labels 16, the sink key as 64 8-bit codes + 2 f16 scales = 68; one f16 key mean (128)
  // per 256-row segment; no value mean, no sink value. Budget: 3.5 bits x 128 elements = 56 per row.
  for (const int64_t rows : {256, 512, 768, 1024, 2048}) {
    TurboQuantBlockCache cache(q3_layout());
    EXPECT_EQ(cache.bytes_per_row(), 55);
    cache.update_and_fetch(rows_with_offset(3, rows, 1, 3.0f), rows_with_offset(3, rows, 2, 1.0f));
    const int64_t segments = (rows - 2) / 256 + 1;
    const int64_t per_head = rows * 55 + segments * 128 + 68 + 16;
    EXPECT_EQ(static_cast<int64_t>(cache.nbytes()), 3 * per_head) << rows << " rows";
    EXPECT_LE(per_head, rows * 56) << rows << " rows";
  }
}

TEST(TurboQuantBlockQ3Layout, SinkKeyIsNearlyExactAndItsValueComesFromTheCodes) {
  TurboQuantBlockCache cache(q3_layout());
  const lm::Tensor k = rows_with_offset(3, 300, 3, 2.0f, 20.0f), v = rows_with_offset(3, 300, 4, 1.0f, 5.0f);
  const lm::KeysValues got = cache.update_and_fetch(k, v);
  const std::vector<float> gk = got.keys.to_f32(), wk = k.to_f32(), gv = got.values.to_f32(), wv = v.to_f32();
  for (int64_t h = 0; h < 3; ++h) {
    double kerr = 0.0, kenergy = 0.0, verr = 0.0, venergy = 0.0;
    for (int64_t e = 0; e < 64; ++e) {
      const auto i = static_cast<std::size_t>(h * 300 * 64 + e);  // row 0 of head h
      kerr += double(gk[i] - wk[i]) * (gk[i] - wk[i]);
      kenergy += double(wk[i]) * wk[i];
      verr += double(gv[i] - wv[i]) * (gv[i] - wv[i]);
      venergy += double(wv[i]) * wv[i];
    }
    EXPECT_LT(kerr / kenergy, 1e-4) << "head " << h;  // 8-bit codes: ~3e-5 relative MSE
    EXPECT_GT(verr / venergy, 1e-3) << "head " << h;  // 3-bit codes: ~0.03
    EXPECT_LT(verr / venergy, 0.1) << "head " << h;
  }
}

TEST(TurboQuantBlockQ3Layout, ObjectiveRankingLowersTheSplitsExpectedScoreError) {
  const SplitKeyCoder split(parse_key_split("32:4,32:3"), 64, 9);
  EXPECT_LT(split.group_mse(0), split.group_mse(1));  // 4 bits below 3 bits
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> spread(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> q(64), v(64), product(64);
    for (int c = 0; c < 64; ++c) {
      q[static_cast<std::size_t>(c)] = spread(rng);
      v[static_cast<std::size_t>(c)] = spread(rng);
      product[static_cast<std::size_t>(c)] = q[static_cast<std::size_t>(c)] * v[static_cast<std::size_t>(c)];
    }
    std::vector<uint8_t> sorted(64), searched(64);
    split.labels_from_weights(product.data(), sorted.data());
    split.labels_from_statistics(q.data(), v.data(), searched.data());
    EXPECT_EQ(std::count(searched.begin(), searched.end(), 0), 32);
    EXPECT_LE(split_objective(split, searched, q, v), split_objective(split, sorted, q, v)) << "trial " << trial;
  }
  // With every E[q^2] equal, J is lowest with the largest variances in the 4-bit group: the sort.
  std::vector<double> ones(64, 1.0), variance(64);
  for (int c = 0; c < 64; ++c) variance[static_cast<std::size_t>(c)] = 1.0 + (c * 37 % 64);
  std::vector<uint8_t> by_variance(64), searched(64);
  split.labels_from_weights(variance.data(), by_variance.data());
  split.labels_from_statistics(ones.data(), variance.data(), searched.data());
  EXPECT_EQ(searched, by_variance);
}

// Brute-force causal attention over fetched rows (double softmax); GQA hq over h heads.
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
        top = std::max(top, w[static_cast<std::size_t>(j)] = dot * scale);
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

TEST(TurboQuantBlockQ3Layout, FusedAttentionEqualsAttentionOverFetchedRows) {
  // Prefill tiles (decoded), then decode steps (keys scored and values added from their codes;
  // the sink from its 8-bit key and its value's codes): the rows update_and_fetch returns.
  for (const bool sink_values : {false, true}) {
    TurboQuantBlockCache::Settings s = q3_layout();
    s.mean_rows = 32;
    s.key_mean_segment = 32;
    s.sink_values = sink_values;
    TurboQuantBlockCache fused(s), plain(s);
    int64_t first = 0;
    uint64_t seed = 40;
    for (const int64_t n : {90, 3, 1, 1, 40}) {
      const lm::Tensor k = rows_with_offset(3, n, seed++, 3.0f, first == 0 ? 8.0f : 1.0f);
      const lm::Tensor v = rows_with_offset(3, n, seed++, 1.0f);
      const lm::Tensor q = rows_with_offset(9, n, seed++, 0.0f).contiguous();
      if (fused.wants_queries()) fused.observe_queries(q);
      if (plain.wants_queries()) plain.observe_queries(q);
      lm::Tensor out({1, 9, n, 64}, lm::DType::F32);
      fused.fused_attention({&q, &k, &v, 0.05f, std::nullopt}, out);
      const std::vector<float> want = brute_attention(plain.update_and_fetch(k, v), q.to_f32(), 9, n, first, 0.05f);
      const std::vector<float> got = out.to_f32();
      double worst = 0.0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
      EXPECT_LE(worst, 2e-3) << "sink_values " << sink_values << ", chunk of " << n;
      first += n;
    }
  }
}

TEST(TurboQuantBlockQ3Layout, PrefillTilesDecodeTheFloatsOfTheRowDecoder) {
  // The prefill tiles' rows (the split-level tile decoder, attention/split_level_rows.h) against
  // the per-row decode they replaced: decode_rotated_key / decode_rotated_value plus the means,
  // the sink transformed from its 8-bit copy. Bit for bit, over tiles that cut key segments.
  for (const bool value_mean : {false, true}) {
    TurboQuantBlockCache::Settings s = q3_layout();
    s.mean_rows = 32;
    s.key_mean_segment = 32;
    s.value_mean = value_mean;
    TurboQuantBlockCache cache(s);
    uint64_t seed = 70;
    int64_t rows = 0;
    for (const int64_t n : {50, 80, 7}) {
      const lm::Tensor k = rows_with_offset(3, n, seed++, 3.0f, rows == 0 ? 8.0f : 1.0f);
      const lm::Tensor v = rows_with_offset(3, n, seed++, 1.0f);
      const lm::Tensor q = rows_with_offset(9, n, seed++, 0.0f).contiguous();
      if (cache.wants_queries()) cache.observe_queries(q);
      lm::Tensor out({1, 9, n, 64}, lm::DType::F32);
      cache.fused_attention({&q, &k, &v, 0.05f, std::nullopt}, out);
      rows += n;
    }
    ASSERT_EQ(cache.offset(), rows);
    ASSERT_NE(cache.key_mean(0, 0, 40), nullptr);
    const TurboQuantBlockSplitRows source(cache, rows);
    for (int64_t h = 0; h < 3; ++h) {
      std::vector<float> want_k(static_cast<std::size_t>(rows * 64)), want_v = want_k;
      std::vector<float> scratch(128);
      for (int64_t j = 0; j < rows; ++j) {
        float* k = want_k.data() + j * 64;
        float* v = want_v.data() + j * 64;
        if (j < cache.sink_rows_held()) {
          cache.decode_key(0, h, j, scratch.data(), scratch.data() + 64);
          cache.split()->forward(cache.key_permutation(0, h), scratch.data(), k);
          cache.decode_value(0, h, j, scratch.data(), scratch.data() + 64);
          cache.value_rotation().forward(scratch.data(), v);
          continue;
        }
        cache.decode_rotated_key(0, h, j, k);
        if (const uint16_t* mu = cache.key_mean(0, h, j)) {
          for (int e = 0; e < 64; ++e) k[e] += base::f16_to_f32(mu[e]);
        }
        cache.decode_rotated_value(0, h, j, v);
        if (const uint16_t* mu = cache.value_mean(0, h)) {
          for (int e = 0; e < 64; ++e) v[e] += base::f16_to_f32(mu[e]);
        }
      }
      for (const auto& [j0, j1] : {std::pair<int64_t, int64_t>{0, 64}, {64, 128}, {128, rows}, {1, 2}, {30, 95}}) {
        std::vector<float> got_k(static_cast<std::size_t>((j1 - j0) * 64), -7.0f), got_v = got_k;
        source.transformed_keys(0, h, j0, j1, got_k.data());
        source.transformed_values(0, h, j0, j1, got_v.data());
        const auto from = static_cast<std::ptrdiff_t>(j0 * 64), to = static_cast<std::ptrdiff_t>(j1 * 64);
        EXPECT_EQ(got_k, std::vector<float>(want_k.begin() + from, want_k.begin() + to))
            << "keys, head " << h << ", rows " << j0 << ".." << j1 << ", value_mean " << value_mean;
        EXPECT_EQ(got_v, std::vector<float>(want_v.begin() + from, want_v.begin() + to))
            << "values, head " << h << ", rows " << j0 << ".." << j1 << ", value_mean " << value_mean;
      }
    }
  }
}

TEST(TurboQuantBlockQ3Layout, StateRoundTripsAndOldMetaStillRestores) {
  TurboQuantBlockCache cache(q3_layout());
  cache.observe_queries(rows_with_offset(9, 300, 20, 0.0f));
  cache.update_and_fetch(rows_with_offset(3, 300, 21, 3.0f, 10.0f), rows_with_offset(3, 300, 22, 1.0f));
  const std::vector<lm::Tensor> state = cache.state();
  const std::vector<std::string> meta = cache.meta_state();
  // Codes and scales (4), the key means, the sink keys, the labels: no value mean, no sink values.
  EXPECT_EQ(state.size(), 7u);
  EXPECT_EQ(cache.meta_state().size(), 19u);
  TurboQuantBlockCache restored(8, 1, 1, 0);
  restored.from_state(state, cache.meta_state());
  EXPECT_EQ(restored.meta_state(), cache.meta_state());
  const lm::Tensor k2 = rows_with_offset(3, 20, 23, 3.0f), v2 = rows_with_offset(3, 20, 24, 1.0f);
  const lm::KeysValues a = cache.update_and_fetch(k2, v2), b = restored.update_and_fetch(k2, v2);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  // A sink tensor of the wrong format is refused naming it.
  std::vector<lm::Tensor> bad = state;
  bad[5] = lm::Tensor({1, 3, 1, 64}, lm::DType::F16);
  TurboQuantBlockCache broken(8, 1, 1, 0);
  try {
    broken.from_state(bad, meta);
    FAIL() << "accepted an f16 sink for sink_format q8";
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("sink keys"), std::string::npos) << e.what();
  }
  // A state written before these options (15 meta entries: f16 sinks with values, value means)
  // restores with those defaults.
  TurboQuantBlockCache::Settings old = q3_layout();
  old.key_split_rank = "product";
  old.value_mean = true;
  old.sink_values = true;
  old.sink_format = "f16";
  TurboQuantBlockCache before(old);
  before.update_and_fetch(rows_with_offset(3, 40, 25, 3.0f), rows_with_offset(3, 40, 26, 1.0f));
  std::vector<std::string> meta15 = before.meta_state();
  meta15.resize(15);
  TurboQuantBlockCache from_old(8, 1, 1, 0);
  from_old.from_state(before.state(), meta15);
  EXPECT_EQ(from_old.meta_state(), before.meta_state());
}

TEST(TurboQuantBlockQ3Layout, SplitScalesUpToLargerHeads) {
  // The preset's 32:4,32:3 at head_dim 256 (Gemma 3) is 128:4,128:3: keys 64 + 48 code bytes + 2
  // scales, values 96 + 4 (blocks of 64); 48 channels do not divide 64 and stay refused.
  TurboQuantBlockCache::Settings s = q3_layout();
  s.head_dim = 256;
  TurboQuantBlockCache cache(s);
  ASSERT_NE(cache.split(), nullptr);
  EXPECT_EQ(cache.split()->group(0).channels, 128);
  EXPECT_EQ(cache.split()->group(1).channels, 128);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(2 * 300 * 256));
  for (float& e : x) e = normal(rng);
  const lm::Tensor k = lm::Tensor::from_f32(x, {1, 2, 300, 256}, lm::DType::F32);
  const lm::KeysValues kv = cache.update_and_fetch(k, k);
  EXPECT_EQ(cache.bytes_per_row(), 114 + 100);
  EXPECT_EQ(static_cast<int64_t>(cache.nbytes()), 2 * (512 * 214 + 2 * 512 + (256 + 16) + 64));
  double err = 0.0, energy = 0.0;
  const std::vector<float> got = kv.keys.to_f32();
  for (std::size_t i = 0; i < x.size(); ++i) {
    err += double(got[i] - x[i]) * (got[i] - x[i]);
    energy += double(x[i]) * x[i];
  }
  EXPECT_LT(err / energy, 0.05);
  s.head_dim = 64;
  s.key_split = "32:4,16:3";
  EXPECT_THROW(TurboQuantBlockCache{s}, QuantizerConfigError);
}

TEST(TurboQuantBlockQ3Layout, BadFieldsAreNamed) {
  auto expect_error = [](const TurboQuantBlockCache::Settings& s, const std::string& needle) {
    try {
      TurboQuantBlockCache cache(s);
      FAIL() << "accepted " << needle;
    } catch (const QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  TurboQuantBlockCache::Settings s = q3_layout();
  s.key_split_rank = "greedy";
  expect_error(s, "key_split_rank for 'turboquant_block' must be 'product' or 'objective', got 'greedy'");
  s = q3_layout();
  s.sink_format = "q4";
  expect_error(s, "sink_format for 'turboquant_block' must be 'f16' or 'q8', got 'q4'");
  // The same through the method's fields.
  KVCacheConfig config;
  config.method = "turboquant_block";
  config.head_dim = 64;
  config.turboquant_block.sink_format = "bf16";
  EXPECT_THROW(KVCacheBuilder(config).build(), QuantizerConfigError);
}

}  // namespace
}  // namespace veloxquant
