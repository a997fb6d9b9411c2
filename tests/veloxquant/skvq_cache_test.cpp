// skvq against an independent reference written from its card (docs/methods/skvq.md): the first
// n_sink tokens and the window (window..window + 31 newest tokens) come back as given; the rows
// between are quantized per token in groups of G channels taken in the head's range order (fixed
// by positions [n_sink, n_sink + 32)), each group clipped to [a min, a max] with the factor
// a = alpha (1 - 0.05 k), k < 11, of least squared error (ties to the larger), f16 (scale, min).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <tuple>

#include "base/error.h"
#include "base/half.h"
#include "support/allocation_counter.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/caches/skvq_cache.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

float f16_round(float x) { return base::f16_to_f32(base::f32_to_f16(x)); }

// The stored f16 scale: a scale that rounds to zero becomes the smallest subnormal.
float stored_scale(float s) {
  uint16_t h = base::f32_to_f16(s);
  if ((h & 0x7fffu) == 0) h = 1;
  return base::f16_to_f32(h);
}

// One group quantize-dequantized with the clip factor `a`; returns the squared error.
double clip_reference(const std::vector<float>& x, int bits, float a, std::vector<float>& out) {
  const float lo = *std::min_element(x.begin(), x.end()), hi = *std::max_element(x.begin(), x.end());
  const float levels = static_cast<float>((1 << bits) - 1);
  const float mn = f16_round(a * lo);
  const float scale = stored_scale(std::max((a * hi - mn) / levels, 1e-8f));
  out.clear();
  double err = 0;
  for (float v : x) {
    const float code = std::clamp(std::nearbyint((v - mn) / scale), 0.0f, levels);
    out.push_back(code * scale + mn);
    err += (double(out.back()) - double(v)) * (double(out.back()) - double(v));
  }
  return err;
}

// One row [d] quantize-dequantized in place, channels in `order`.
void reference_row(float* row, int64_t d, const std::vector<int>& order, int bits, int group, bool search,
                   double alpha) {
  std::vector<float> ordered(static_cast<std::size_t>(d));
  for (int64_t p = 0; p < d; ++p) ordered[static_cast<std::size_t>(p)] = row[order[static_cast<std::size_t>(p)]];
  for (int64_t g0 = 0; g0 < d; g0 += group) {
    const std::vector<float> x(ordered.begin() + g0, ordered.begin() + std::min<int64_t>(d, g0 + group));
    std::vector<float> best, trial;
    double best_err = clip_reference(x, bits, static_cast<float>(alpha), best);
    for (int k = 1; search && k < 11; ++k) {
      const double e = clip_reference(x, bits, static_cast<float>(alpha * (1.0 - 0.05 * k)), trial);
      if (e < best_err) {
        best_err = e;
        best = trial;
      }
    }
    std::copy(best.begin(), best.end(), ordered.begin() + g0);
  }
  for (int64_t p = 0; p < d; ++p) row[order[static_cast<std::size_t>(p)]] = ordered[static_cast<std::size_t>(p)];
}

// Channels by ascending range over rows [r0, r0 + 32) of one head [t, d]; ties to the lower.
std::vector<int> reference_order(const std::vector<float>& x, int64_t r0, int64_t d) {
  std::vector<std::pair<float, int>> ranked;
  for (int64_t c = 0; c < d; ++c) {
    float lo = x[r0 * d + c], hi = lo;
    for (int64_t r = r0; r < r0 + 32; ++r) {
      lo = std::min(lo, x[r * d + c]);
      hi = std::max(hi, x[r * d + c]);
    }
    ranked.push_back({hi - lo, static_cast<int>(c)});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<int> order;
  order.reserve(ranked.size());
  for (auto& r : ranked) order.push_back(r.second);
  return order;
}

// Keys with channel c of head h scaled by 1 + ((3c + h) % 11) and a few spikes: ranges differ by
// channel (what reorder is for) and groups hold outliers (what clipping is for).
lm::Tensor shaped_kv(int64_t heads, int64_t t, int64_t d, uint64_t seed, lm::DType dtype) {
  std::vector<float> x = test_support::random_kv(1, heads, t, d, seed, lm::DType::F32).to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        float& v = x[static_cast<std::size_t>((h * t + r) * d + c)];
        v *= 0.25f * static_cast<float>(1 + (3 * c + h) % 11);
        if ((r * 7 + c * 13 + h) % 97 == 0) v *= 6.0f;
      }
    }
  }
  return lm::Tensor::from_f32(x, {1, heads, t, d}, dtype);
}

SkvqOptions options(int bk, int bv, int group, int window, int n_sink, bool reorder, bool search, double alpha) {
  SkvqOptions o;
  o.skvq_bits_key = bk;
  o.skvq_bits_value = bv;
  o.skvq_group_size = group;
  o.skvq_window = window;
  o.skvq_n_sink = n_sink;
  o.skvq_reorder = reorder;
  o.skvq_clip_search = search;
  o.skvq_clip_alpha = alpha;
  return o;
}

// What the card says the cache returns for one head's rows x [t, d].
std::vector<float> reference_head(std::vector<float> x, int64_t t, int64_t d, const SkvqOptions& o, int bits) {
  const int64_t q = SkvqCache::quantized_rows_for(t, o.skvq_n_sink, o.skvq_window);
  if (q == 0) return x;
  std::vector<int> order(static_cast<std::size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  if (o.skvq_reorder) order = reference_order(x, o.skvq_n_sink, d);
  for (int64_t r = o.skvq_n_sink; r < o.skvq_n_sink + q; ++r) {
    reference_row(x.data() + r * d, d, order, bits, o.skvq_group_size, o.skvq_clip_search, o.skvq_clip_alpha);
  }
  return x;
}

std::vector<float> head_rows(const std::vector<float>& all, int64_t h, int64_t t, int64_t d) {
  return {all.begin() + h * t * d, all.begin() + (h + 1) * t * d};
}

TEST(Skvq, MatchesTheReferenceBitExactly) {
  const int64_t heads = 2;
  // bits k/v, group, window, n_sink, reorder, search, alpha, d, chunks
  using Case = std::tuple<int, int, int, int, int, bool, bool, double, int64_t, std::vector<int64_t>>;
  for (const Case& c :
       {Case{2, 2, 32, 128, 5, true, true, 1.0, 64, {300}},
        Case{2, 2, 32, 128, 5, true, true, 1.0, 64, {37, 64, 1, 1, 200, 1}},
        Case{3, 4, 16, 20, 0, true, true, 0.9, 48, {90, 3, 1}}, Case{2, 1, 24, 0, 3, false, true, 1.0, 40, {70, 1}},
        Case{4, 2, 8, 10, 2, true, false, 0.8, 32, {120}}, Case{8, 8, 64, 5, 1, true, true, 1.0, 64, {33, 40}}}) {
    const auto& [bk, bv, group, window, n_sink, reorder, search, alpha, d, chunks] = c;
    const SkvqOptions o = options(bk, bv, group, window, n_sink, reorder, search, alpha);
    SkvqCache cache(o);
    int64_t t = 0;
    for (int64_t n : chunks) t += n;
    const lm::Tensor k = shaped_kv(heads, t, d, 41, lm::DType::F32), v = shaped_kv(heads, t, d, 42, lm::DType::F32);
    lm::KeysValues got;
    for (int64_t at = 0; int64_t n : chunks) {
      got = cache.update_and_fetch(test_support::token_rows(k, at, at + n), test_support::token_rows(v, at, at + n));
      at += n;
    }
    ASSERT_EQ(cache.offset(), t);
    EXPECT_EQ(cache.quantized_rows(), SkvqCache::quantized_rows_for(t, n_sink, window));
    EXPECT_EQ(cache.ordered(), reorder && cache.quantized_rows() > 0);
    const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32(), kf = k.to_f32(), vf = v.to_f32();
    for (int64_t h = 0; h < heads; ++h) {
      EXPECT_EQ(head_rows(gk, h, t, d), reference_head(head_rows(kf, h, t, d), t, d, o, bk)) << "keys, head " << h;
      EXPECT_EQ(head_rows(gv, h, t, d), reference_head(head_rows(vf, h, t, d), t, d, o, bv)) << "values, head " << h;
      if (reorder) {
        const std::vector<int> want = reference_order(head_rows(kf, h, t, d), n_sink, d);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), cache.key_order(0, h)));
      }
    }
  }
}

TEST(Skvq, SinksAndWindowComeBackAsGivenInEveryDtype) {
  for (lm::DType dtype : {lm::DType::F16, lm::DType::BF16, lm::DType::F32}) {
    SkvqCache cache(SkvqOptions{});  // n_sink 5, window 128
    const int64_t t = 400, d = 64;
    const lm::Tensor k = shaped_kv(3, t, d, 5, dtype), v = shaped_kv(3, t, d, 6, dtype);
    const lm::KeysValues got = cache.update_and_fetch(k, v);
    EXPECT_EQ(got.keys.dtype(), dtype);
    const int64_t frontier = cache.frontier();
    EXPECT_EQ(frontier, 5 + 256);  // 400 - 5 - 128 = 267 rows past the window: 8 blocks of 32
    for (int64_t h = 0; h < 3; ++h) {
      for (int64_t r = 0; r < t; ++r) {
        if (r >= 5 && r < frontier) continue;
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_EQ(got.keys.get({0, h, r, c}), k.get({0, h, r, c})) << "row " << r;
          ASSERT_EQ(got.values.get({0, h, r, c}), v.get({0, h, r, c})) << "row " << r;
        }
      }
    }
  }
}

// Mean squared error of the quantized rows of a cache fed x.
double quantized_mse(const SkvqOptions& o, const lm::Tensor& x) {
  SkvqCache cache(o);
  const std::vector<float> got = cache.update_and_fetch(x, x).keys.to_f32(), want = x.to_f32();
  const int64_t heads = x.dim(1), t = x.dim(2), d = x.dim(3);
  double err = 0;
  int64_t n = 0;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = cache.sink_rows(); r < cache.frontier(); ++r) {
      for (int64_t c = 0; c < d; ++c, ++n) {
        const double e =
            got[static_cast<std::size_t>((h * t + r) * d + c)] - want[static_cast<std::size_t>((h * t + r) * d + c)];
        err += e * e;
      }
    }
  }
  return err / static_cast<double>(n);
}

TEST(Skvq, ClipSearchAndReorderLowerTheError) {
  // Gaussian rows with 2% outliers (x8); channel scales differ, as in real keys.
  for (int bits : {2, 3, 4}) {
    const lm::Tensor x = shaped_kv(2, 500, 64, 77 + bits, lm::DType::F32);
    const double plain = quantized_mse(options(bits, bits, 32, 16, 0, false, false, 1.0), x);
    const double clipped = quantized_mse(options(bits, bits, 32, 16, 0, false, true, 1.0), x);
    const double reordered = quantized_mse(options(bits, bits, 32, 16, 0, true, false, 1.0), x);
    const double both = quantized_mse(options(bits, bits, 32, 16, 0, true, true, 1.0), x);
    // The search includes a = 1 and keeps the least error group by group: never worse.
    EXPECT_LE(clipped, plain) << bits;
    EXPECT_LE(both, reordered) << bits;
    // Measured (plain / clipped / reordered / both): 2 bits 5.15 / 3.15 / 4.25 / 2.58, 3 bits
    // 0.81 / 0.72 / 0.72 / 0.64, 4 bits 0.173 / 0.168 / 0.155 / 0.149.
    EXPECT_LT(clipped, plain) << bits;
    EXPECT_LT(reordered, plain) << bits;
    EXPECT_LT(both, plain * 0.9) << bits;
    if (bits == 2) {
      EXPECT_LT(clipped, plain * 0.7);  // the outliers dominate a 2-bit group's range
    }
  }
}

TEST(Skvq, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "skvq";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 2/2 bits, G 32, window 128, 5 sinks
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(1, h, 100, d, i), test_support::random_kv(1, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 f16 tokens: 5 sinks, 160 quantized rows (5 blocks) in a 256-row region, 135 window rows
  // in its 160-row buffer. A code row: 64 codes at 2 bits = 4 words + 2 (scale, min) pairs = 24 bytes.
  const std::size_t codes = 2 * h * 256 * 24;
  const std::size_t orders = 2 * h * d * 4;
  const std::size_t sinks = 2 * h * 5 * d * 2;
  const std::size_t window = 2 * h * 160 * d * 2;
  EXPECT_EQ(cache->nbytes(), codes + orders + sinks + window);
  EXPECT_EQ(cache->nbytes(), 110080u);
}

TEST(Skvq, TrimInsideTheFlushBlockIsExactAndDeeperReopensDecodedRows) {
  const int64_t heads = 2, d = 32, t = 250;
  const SkvqOptions o = options(2, 2, 16, 40, 4, true, true, 1.0);
  const lm::Tensor k = shaped_kv(heads, t, d, 50, lm::DType::F32), v = shaped_kv(heads, t, d, 51, lm::DType::F32);
  const lm::Tensor nk = shaped_kv(heads, 3, d, 52, lm::DType::F32), nv = shaped_kv(heads, 3, d, 53, lm::DType::F32);
  // 250 - 4 - 40 = 206 past the window: 6 blocks (192 rows); keeping 240 leaves 6 blocks.
  SkvqCache a(o);
  a.update_and_fetch(k, v);
  EXPECT_EQ(a.trim(10), 10);
  SkvqCache fresh(o);
  fresh.update_and_fetch(test_support::token_rows(k, 0, 240), test_support::token_rows(v, 0, 240));
  EXPECT_EQ(a.update_and_fetch(nk, nv).keys.to_f32(), fresh.update_and_fetch(nk, nv).keys.to_f32());
  EXPECT_EQ(a.nbytes(), fresh.nbytes());
  // Keeping 200 leaves 4 blocks: rows 132..199 return to the window as they were decoded.
  SkvqCache b(o);
  const std::vector<float> decoded = b.update_and_fetch(k, v).keys.to_f32();
  EXPECT_EQ(b.trim(50), 50);
  EXPECT_EQ(b.quantized_rows(), 128);
  const std::vector<float> kept = b.update_and_fetch(nk, nv).keys.to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < 200; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        ASSERT_EQ(kept[static_cast<std::size_t>((h * 203 + r) * d + c)],
                  decoded[static_cast<std::size_t>((h * t + r) * d + c)]);
      }
    }
  }
  // Trimmed below the first block: the orders unfreeze and the next flush fixes them anew.
  EXPECT_EQ(b.trim(160), 160);
  EXPECT_EQ(b.quantized_rows(), 0);
  EXPECT_FALSE(b.ordered());
  EXPECT_EQ(b.trim(1000), 43);
  EXPECT_TRUE(b.empty());
}

TEST(Skvq, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6;
  const test_support::RowMaker shaped = [](int64_t h, int64_t n, int64_t dim, uint64_t s) {
    return shaped_kv(h, n, dim, s, lm::DType::F32);
  };
  using Case = std::tuple<int, int, int, int, int, bool, int64_t>;
  for (const auto& [bk, bv, group, window, n_sink, reorder, d] :
       {Case{2, 2, 32, 128, 5, true, 64}, Case{4, 3, 16, 16, 0, true, 64}, Case{2, 4, 24, 0, 2, false, 48},
        Case{1, 8, 32, 40, 5, true, 128}}) {
    SkvqCache fused(options(bk, bv, group, window, n_sink, reorder, true, 1.0));
    SkvqCache plain(options(bk, bv, group, window, n_sink, reorder, true, 1.0));
    const std::vector<int64_t> chunks{300, 17, 1, 1};
    const std::vector<float> worst =
        test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 600, shaped, shaped);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      EXPECT_LE(worst[c], 1e-3f) << "bits " << bk << "/" << bv << " group " << group << " chunk " << chunks[c];
    }
  }
}

TEST(Skvq, EachBatchRowIsItsOwnSequence) {
  // Orders, codes and attention per (batch, kv head): a batch of two equals two caches of one,
  // with different key and value head dims.
  const int64_t heads = 2, t = 230, dk = 32, dv = 48, hq = 4;
  const SkvqOptions o = options(2, 3, 16, 30, 2, true, true, 1.0);
  const lm::Tensor k = test_support::random_kv(2, heads, t, dk, 80, lm::DType::F16);
  const lm::Tensor v = test_support::random_kv(2, heads, t, dv, 81, lm::DType::F16);
  const lm::Tensor q = test_support::random_kv(2, hq, 1, dk, 82, lm::DType::F32);
  const lm::Tensor k1 = test_support::random_kv(2, heads, 1, dk, 83, lm::DType::F16);
  const lm::Tensor v1 = test_support::random_kv(2, heads, 1, dv, 84, lm::DType::F16);
  SkvqCache both(o);
  const std::vector<float> kb = both.update_and_fetch(k, v).keys.to_f32();
  lm::Tensor out({2, hq, 1, dv}, lm::DType::F32);
  both.fused_attention({&q, &k1, &v1, 0.2f, std::nullopt}, out);
  const std::vector<float> ob = out.to_f32();
  for (int64_t b = 0; b < 2; ++b) {
    SkvqCache one(o);
    const std::vector<float> ko = one.update_and_fetch(k.slice(0, b, b + 1), v.slice(0, b, b + 1)).keys.to_f32();
    EXPECT_TRUE(std::equal(ko.begin(), ko.end(), kb.begin() + b * heads * t * dk)) << "batch " << b;
    const lm::Tensor qb = q.slice(0, b, b + 1).contiguous();
    lm::Tensor o1({1, hq, 1, dv}, lm::DType::F32);
    const lm::Tensor kb1 = k1.slice(0, b, b + 1), vb1 = v1.slice(0, b, b + 1);
    one.fused_attention({&qb, &kb1, &vb1, 0.2f, std::nullopt}, o1);
    const std::vector<float> oo = o1.to_f32();
    for (std::size_t i = 0; i < oo.size(); ++i) EXPECT_NEAR(oo[i], ob[b * oo.size() + i], 1e-5f) << "batch " << b;
  }
}

TEST(Skvq, StateRoundTripKeepsOrdersAndRejectsBadOrders) {
  const SkvqOptions o = options(3, 2, 16, 20, 3, true, true, 0.95);
  SkvqCache cache(o);
  cache.update_and_fetch(shaped_kv(2, 90, 32, 60, lm::DType::F16), shaped_kv(2, 90, 32, 61, lm::DType::F16));
  SkvqCache restored(SkvqOptions{});
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_TRUE(restored.ordered());
  EXPECT_TRUE(std::equal(cache.key_order(0, 1), cache.key_order(0, 1) + 32, restored.key_order(0, 1)));
  const lm::Tensor k = shaped_kv(2, 40, 32, 62, lm::DType::F16), v = shaped_kv(2, 40, 32, 63, lm::DType::F16);
  EXPECT_EQ(cache.update_and_fetch(k, v).values.to_f32(), restored.update_and_fetch(k, v).values.to_f32());
  std::vector<lm::Tensor> state = cache.state();
  state[6] = state[6].clone();
  state[6].data<int32_t>()[1] = state[6].data<int32_t>()[0];  // no longer a permutation
  EXPECT_THROW(restored.from_state(state, cache.meta_state()), base::FormatError);
  std::vector<std::string> meta = cache.meta_state();
  meta[10] = "7";  // quantized rows that the offset does not give
  EXPECT_THROW(restored.from_state(cache.state(), meta), base::FormatError);
}

TEST(Skvq, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(SkvqOptions&)>& change) {
    return test_support::option_error("skvq", change);
  };
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_bits_key = 0; }).find("skvq_bits_key"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_bits_key = 9; }).find("skvq_bits_key"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_bits_value = 9; }).find("skvq_bits_value"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_group_size = 0; }).find("skvq_group_size"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_window = -1; }).find("skvq_window"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_n_sink = -1; }).find("skvq_n_sink"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_clip_alpha = 0.0; }).find("skvq_clip_alpha"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_clip_alpha = 1.5; }).find("skvq_clip_alpha"), std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_clip_alpha = std::nan(""); }).find("skvq_clip_alpha"),
            std::string::npos);
  EXPECT_NE(message([](SkvqOptions& o) { o.skvq_max_ctx = 0; }).find("skvq_max_ctx"), std::string::npos);
  EXPECT_EQ(message([](SkvqOptions& o) {
              o.skvq_window = 0;
              o.skvq_n_sink = 0;
              o.skvq_clip_alpha = 0.5;
            }),
            "accepted");
  EXPECT_THROW(SkvqCache(options(2, 2, 32, 128, 5, true, true, -1.0)), QuantizerConfigError);
}

}  // namespace
}  // namespace veloxquant
