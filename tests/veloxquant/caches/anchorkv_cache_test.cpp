// anchorkv against an independent brute-force reference written from its card
// (docs/methods/anchorkv.md): the rows that leave the exact window in one call are compressed
// together — ceil(frac * rows) anchors, round(rho * new) of them by key-as-query attention mass
// (the window's keys as queries), each other key / value as c * (its anchor of largest
// projection), c in f16, and the highest-utility rows (mass x squared error) with a per-row
// min/step residual code while all residuals fit theta of the f16 bytes. The uniform anchor
// samples come from the library's generator; the reference takes their positions from the cache
// and re-derives everything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "base/half.h"
#include "support/allocation_counter.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "veloxquant/caches/anchorkv_cache.h"
#include "veloxquant/caches/anchorkv_records.h"
#include "veloxquant/caches/anchorkv_residuals.h"
#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

float f16(float x) { return base::f16_to_f32(base::f32_to_f16(x)); }

// The reference's residual: min and step rounded to f16, codes rounded to nearest, then decoded.
std::vector<float> quantized_residual(const std::vector<float>& r, int bits) {
  const float lo = *std::min_element(r.begin(), r.end()), hi = *std::max_element(r.begin(), r.end());
  const int levels = (1 << bits) - 1;
  const float mn = f16(lo), step = f16((hi - mn) / float(levels));
  std::vector<float> out(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    const int c = step > 0 ? std::clamp(int(std::lround((r[i] - mn) / step)), 0, levels) : 0;
    out[i] = mn + float(c) * step;
  }
  return out;
}

AnchorKvOptions small_options() {
  AnchorKvOptions o;
  o.anchorkv_window = 4;
  o.anchorkv_anchor_frac = 0.125;
  o.anchorkv_rho = 0.5;
  o.anchorkv_theta = 0.1;
  o.anchorkv_residual_bits = 2;
  return o;
}

TEST(AnchorKv, OneSpillIsTheReference) {
  const int64_t heads = 2, d = 16, n = 40, w = 4, spill = n - w;
  const AnchorKvOptions o = small_options();
  AnchorKvCache cache(o);
  const lm::Tensor k = test_support::random_kv(1, heads, n, d, 11, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, n, d, 12, lm::DType::F32);
  cache.update_and_fetch(k, v);
  const std::vector<float> kf = k.to_f32(), vf = v.to_f32();
  // ceil(36 / 8) = 5 anchors; residual slots: floor(0.1 * 36 rows * 64 bytes / (8 code + 8 param bytes)) = 14.
  ASSERT_EQ(cache.compressed_rows(), spill);
  ASSERT_EQ(cache.anchors(), 5);
  ASSERT_EQ(cache.residual_slots(), 14);
  for (int64_t h = 0; h < heads; ++h) {
    const float* K = &kf[h * n * d];
    const float* V = &vf[h * n * d];
    std::vector<double> mass(spill, 0.0);
    for (int64_t p = spill; p < n; ++p) {
      std::vector<double> l(spill);
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < spill; ++i) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += double(K[p * d + e]) * K[i * d + e];
        mx = std::max(mx, l[i] = dot / 4.0);
      }
      for (double& x : l) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < spill; ++i) mass[i] += l[i] / sum;
    }
    std::vector<int64_t> order(spill);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return mass[a] > mass[b]; });
    std::vector<int32_t> anchors;
    for (int64_t a = 0; a < 5; ++a) anchors.push_back(cache.anchor_position(0, h, a));
    ASSERT_TRUE(std::is_sorted(anchors.begin(), anchors.end()));
    for (int64_t t = 0; t < 3; ++t) {  // round(0.5 * 5) = 3 by attention
      EXPECT_NE(std::find(anchors.begin(), anchors.end(), order[t]), anchors.end()) << "head " << h << " top " << t;
    }
    std::vector<double> utility(spill, -1);
    std::vector<std::vector<float>> rk(spill), rv(spill);
    for (int64_t i = 0; i < spill; ++i) {
      const auto found = std::find(anchors.begin(), anchors.end(), int32_t(i));
      const AnchorKvCache::Record rec = cache.record(0, h, i);
      if (found != anchors.end()) {
        EXPECT_EQ(rec.key_anchor, found - anchors.begin());
        EXPECT_EQ(rec.key_coef, 1.0f);
        EXPECT_EQ(rec.slot, AnchorKvCache::kNoResidual);
        continue;
      }
      double err = 0;
      for (int which = 0; which < 2; ++which) {
        const float* X = which == 0 ? K : V;
        double best = -1, best_dot = 0, best_norm = 1;
        int64_t best_a = 0;
        for (std::size_t a = 0; a < anchors.size(); ++a) {
          double dot = 0, norm = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += double(X[i * d + e]) * X[anchors[a] * d + e],
                norm += double(X[anchors[a] * d + e]) * X[anchors[a] * d + e];
          if (dot * dot / norm > best) best = dot * dot / norm, best_a = int64_t(a), best_dot = dot, best_norm = norm;
        }
        const float c = f16(float(best_dot / best_norm));
        EXPECT_EQ(which == 0 ? rec.key_anchor : rec.value_anchor, best_a) << "row " << i;
        EXPECT_EQ(which == 0 ? rec.key_coef : rec.value_coef, c) << "row " << i;
        std::vector<float>& r = which == 0 ? rk[i] : rv[i];
        for (int64_t e = 0; e < d; ++e) {
          r.push_back(X[i * d + e] - c * X[anchors[best_a] * d + e]);
          err += double(r.back()) * r.back();
        }
      }
      utility[i] = mass[i] * err;
    }
    std::vector<int64_t> by_utility;
    for (int64_t i = 0; i < spill; ++i) {
      if (utility[i] >= 0) by_utility.push_back(i);
    }
    std::stable_sort(by_utility.begin(), by_utility.end(),
                     [&](int64_t a, int64_t b) { return utility[a] > utility[b]; });
    by_utility.resize(14);
    std::vector<float> key(d), value(d);
    for (int64_t i = 0; i < spill; ++i) {
      const bool residual = std::find(by_utility.begin(), by_utility.end(), i) != by_utility.end();
      EXPECT_EQ(cache.record(0, h, i).slot != AnchorKvCache::kNoResidual, residual) << "row " << i;
      cache.reconstruct(0, h, i, key.data(), value.data());
      const AnchorKvCache::Record rec = cache.record(0, h, i);
      const std::vector<float> qk = residual ? quantized_residual(rk[i], 2) : std::vector<float>(d, 0.0f);
      const std::vector<float> qv = residual ? quantized_residual(rv[i], 2) : std::vector<float>(d, 0.0f);
      for (int64_t e = 0; e < d; ++e) {
        EXPECT_NEAR(key[e], rec.key_coef * K[anchors[rec.key_anchor] * d + e] + qk[e], 1e-5) << "row " << i;
        EXPECT_NEAR(value[e], rec.value_coef * V[anchors[rec.value_anchor] * d + e] + qv[e], 1e-5) << "row " << i;
      }
    }
  }
}

TEST(AnchorKv, FusedAttentionEqualsAttentionOverReconstructedRows) {
  for (const double frac : {0.125, 0.6}) {  // 0.6: more than 64 anchors, read per row
    AnchorKvOptions o = small_options();
    o.anchorkv_anchor_frac = frac;
    AnchorKvCache fused(o), plain(o);
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, 2, 6, 16, {150, 9, 1, 1, 40, 1}, 300);
    for (std::size_t i = 0; i < worst.size(); ++i) EXPECT_LE(worst[i], 1e-3f) << "frac " << frac << " chunk " << i;
    if (frac > 0.5) {
      EXPECT_GT(fused.anchors(), 64);
    }
    EXPECT_EQ(fused.nbytes(), plain.nbytes());
  }
}

TEST(AnchorKv, TileRecordKernelsEqualTheScalarLoops) {
  // The dispatched record reader and anchor scorer (anchorkv_records.h) against their scalar
  // references, exactly: whole vectors and a tail, both streams, rows with and without a
  // residual (none, some, all), f16 coefficients of every kind incl. subnormals and negatives.
  uint32_t state = 99;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (const int64_t n : {int64_t{64}, int64_t{37}, int64_t{5}, int64_t{16}}) {
    for (const int every : {0, 1, 3}) {  // residual on no row, every row, about a third
      std::vector<uint32_t> records(static_cast<std::size_t>(3 * n));
      for (int64_t j = 0; j < n; ++j) {
        for (int f = 0; f < 2; ++f) records[static_cast<std::size_t>(3 * j + f)] = (next() & 0xFFFF0000u) | (next() >> 26);
        const bool has = every == 1 || (every == 3 && next() % 3 == 0);
        records[static_cast<std::size_t>(3 * j + 2)] = has ? next() >> 8 : AnchorKvCache::kNoResidual;
      }
      for (int field = 0; field < 2; ++field) {
        std::vector<int32_t> anchor(64, -1), want_anchor(64, -1), at(64, -1), want_at(64, -1);
        std::vector<float> coef(64, -1.0f), want_coef(64, -1.0f);
        std::vector<uint32_t> slot(64, 7), want_slot(64, 7);
        const int64_t got_n = read_anchor_records(records.data(), n, field, anchor.data(), coef.data(), at.data(),
                                                  slot.data());
        const int64_t want_n = scalar::read_anchor_records(records.data(), n, field, want_anchor.data(),
                                                           want_coef.data(), want_at.data(), want_slot.data());
        ASSERT_EQ(got_n, want_n) << n << " " << every;
        EXPECT_EQ(anchor, want_anchor);
        for (int64_t j = 0; j < n; ++j) {
          const float g = coef[static_cast<std::size_t>(j)], w = want_coef[static_cast<std::size_t>(j)];
          EXPECT_TRUE(g == w || (std::isnan(g) && std::isnan(w))) << j;
        }
        EXPECT_TRUE(std::equal(at.begin(), at.begin() + got_n, want_at.begin()));
        EXPECT_TRUE(std::equal(slot.begin(), slot.begin() + got_n, want_slot.begin()));
        // Scores from a table of up to 64 anchors, 1-3 queries, an ld wider than the tile.
        const int64_t n_anchor = 64;
        for (int32_t& a : anchor) a = static_cast<int32_t>(next() % n_anchor);
        for (float& c : coef) c = static_cast<float>(static_cast<int32_t>(next() >> 8)) * 1e-6f;
        std::vector<float> table(static_cast<std::size_t>(3 * n_anchor));
        for (float& t : table) t = static_cast<float>(static_cast<int32_t>(next() >> 4)) * 1e-7f;
        for (int64_t nq = 1; nq <= 3; ++nq) {
          const int64_t ld = n + 3;
          std::vector<float> got(static_cast<std::size_t>(nq * ld), 5.0f), want = got;
          anchor_row_scores(anchor.data(), coef.data(), n, table.data(), n_anchor, nq, got.data(), ld);
          scalar::anchor_row_scores(anchor.data(), coef.data(), n, table.data(), n_anchor, nq, want.data(), ld);
          EXPECT_EQ(got, want) << n << " " << nq;
        }
      }
    }
  }
}

TEST(AnchorKv, ResidualCodeKernelsEqualUnpackThenTileKernels) {
  // Residual rows scored and accumulated from their codes (anchorkv_residuals.h; fused on AVX-512
  // for 2-bit rows of 64) against unpacking each row's planes and running score_rows /
  // accumulate_rows, exactly: rows scattered over a slot buffer, whole passes and remainders, 1-4
  // queries, sums that start non-zero; and a width that takes the reference (4 bits).
  uint32_t state = 4242;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  const auto uniform = [&] { return static_cast<float>(next() >> 8) / 16777216.0f * 2.0f - 1.0f; };
  for (const int bits : {2, 4}) {
    const int64_t plane_bytes = 64 * bits / 8, d = 64, slots = 80;
    std::vector<uint8_t> codes(static_cast<std::size_t>(slots * (plane_bytes + 5)));
    for (uint8_t& c : codes) c = static_cast<uint8_t>(next() >> 24);
    for (const int64_t n : {int64_t{8}, int64_t{13}, int64_t{21}, int64_t{64}, int64_t{3}}) {
      std::vector<const uint8_t*> rows(static_cast<std::size_t>(n));
      for (auto& r : rows) r = codes.data() + (next() % slots) * (plane_bytes + 5);
      for (int64_t nq = 1; nq <= 4; ++nq) {
        const int64_t q_stride = 2 * d + 1, ld = n + 1;
        std::vector<float> q(static_cast<std::size_t>(nq * q_stride)), w(static_cast<std::size_t>(nq * ld));
        for (float& x : q) x = uniform();
        for (float& x : w) x = uniform();
        std::vector<float> scratch(static_cast<std::size_t>(n * d));
        std::vector<float> got(static_cast<std::size_t>(nq * ld), 3.0f), want = got;
        score_residual_codes(rows.data(), n, plane_bytes, bits, q.data(), q_stride, nq, got.data(), ld, scratch.data());
        scalar::score_residual_codes(rows.data(), n, plane_bytes, bits, q.data(), q_stride, nq, want.data(), ld,
                                     scratch.data());
        EXPECT_EQ(got, want) << bits << " " << n << " " << nq;
        std::vector<float> sums(static_cast<std::size_t>(nq * (d + 4)));
        for (float& x : sums) x = uniform();
        std::vector<float> want_sums = sums;
        accumulate_residual_codes(rows.data(), n, plane_bytes, bits, w.data(), ld, nq, sums.data(), d + 4,
                                  scratch.data());
        scalar::accumulate_residual_codes(rows.data(), n, plane_bytes, bits, w.data(), ld, nq, want_sums.data(), d + 4,
                                          scratch.data());
        EXPECT_EQ(sums, want_sums) << bits << " " << n << " " << nq;
      }
    }
  }
  // veloxquant_lib's own dispatch (a sanitizer build may compile its kernels without AVX-512 while
  // lm keeps every target).
  if (std::string(attention::kernels::target_name()).rfind("AVX3", 0) == 0) {
    EXPECT_TRUE(residual_codes_fuse(2, 16));
  }
  EXPECT_FALSE(residual_codes_fuse(4, 32));
}

TEST(AnchorKv, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 3, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "anchorkv";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: window 32, 1/128 anchors, 2-bit residuals, theta 0.05
  for (int64_t s : {300, 1, 1}) {
    cache->update_and_fetch(test_support::random_kv(b, h, s, d, s), test_support::random_kv(b, h, s, d, s + 1));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  const auto& a = dynamic_cast<const AnchorKvCache&>(*cache);
  // 302 tokens: 270 compressed, ceil(270 / 128) = 3 anchors, floor(0.05 * 270 * 256 / (32 + 8)) = 86 slots.
  EXPECT_EQ(a.compressed_rows(), 270);
  EXPECT_EQ(a.anchors(), 3);
  EXPECT_EQ(a.residual_slots(), 86);
  const std::size_t heads = b * h, region = 512;             // records in 256-row steps, anchors 16, slots 64
  const std::size_t anchors = heads * 16 * (2 * d * 2 + 4);  // f16 key + value, i32 position
  const std::size_t records = heads * region * 12;
  const std::size_t residuals = heads * 128 * (2 * d * 2 / 8 + 8);
  const std::size_t window = 2 * heads * 32 * d * 2;
  EXPECT_EQ(cache->nbytes(), anchors + records + residuals + window);
  // The eval's window: 2048 tokens in 512-token calls -> 2016 rows (2048 capacity), 16 anchors,
  // 645 slots (704 capacity): 65088 bytes per kv head, 2860.3 B/token on SmolLM2's 90 kv heads.
  auto window_cache = KVCacheBuilder(c).build().serving();
  for (int i = 0; i < 4; ++i) {
    window_cache->update_and_fetch(test_support::random_kv(1, 1, 512, d, 70 + i),
                                   test_support::random_kv(1, 1, 512, d, 80 + i));
  }
  EXPECT_EQ(window_cache->nbytes(), 65088u);
}

TEST(AnchorKv, StateRoundTripAndCloneContinueIdentically) {
  const int64_t heads = 2, hq = 4, d = 16;
  AnchorKvCache cache(small_options());
  const auto step = [&](lm::KVCache& c, int64_t s, uint64_t at) {
    const lm::Tensor k = test_support::random_kv(1, heads, s, d, at, lm::DType::F16);
    const lm::Tensor v = test_support::random_kv(1, heads, s, d, at + 1, lm::DType::F16);
    const lm::Tensor q = test_support::random_kv(1, hq, s, d, at + 2, lm::DType::F32);
    lm::Tensor out({1, hq, s, d}, lm::DType::F32);
    c.fused_attention({&q, &k, &v, 0.25f, std::nullopt}, out);
    return out.to_f32();
  };
  step(cache, 37, 50);
  step(cache, 1, 53);
  AnchorKvCache restored(AnchorKvOptions{});
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.nbytes() > 0, true);
  const auto copy = cache.clone();
  for (uint64_t i = 0; i < 4; ++i) {
    const int64_t s = i == 0 ? 20 : 1;
    const std::vector<float> a = step(cache, s, 200 + 3 * i);
    EXPECT_EQ(a, step(restored, s, 200 + 3 * i)) << "step " << i;
    EXPECT_EQ(a, step(*copy, s, 200 + 3 * i)) << "step " << i;
  }
  EXPECT_EQ(restored.anchors(), cache.anchors());
  EXPECT_EQ(restored.residual_slots(), cache.residual_slots());
  std::vector<std::string> meta = cache.meta_state();
  meta[8] = "0";  // no anchors for compressed rows
  EXPECT_THROW(restored.from_state(cache.state(), meta), base::FormatError);
}

TEST(AnchorKv, BadOptionsNameTheField) {
  const auto names = [](const std::function<void(AnchorKvOptions&)>& change, const std::string& field) {
    const std::string m = test_support::option_error<AnchorKvOptions>("anchorkv", change, 64);
    EXPECT_NE(m.find(field), std::string::npos) << m;
  };
  names([](AnchorKvOptions& o) { o.anchorkv_theta = -0.1; }, "anchorkv_theta");
  names([](AnchorKvOptions& o) { o.anchorkv_theta = 1.5; }, "anchorkv_theta");
  names([](AnchorKvOptions& o) { o.anchorkv_window = 0; }, "anchorkv_window");
  names([](AnchorKvOptions& o) { o.anchorkv_rho = 2; }, "anchorkv_rho");
  names([](AnchorKvOptions& o) { o.anchorkv_anchor_frac = 0; }, "anchorkv_anchor_frac");
  names([](AnchorKvOptions& o) { o.anchorkv_residual_bits = 3; }, "anchorkv_residual_bits");
  names([](AnchorKvOptions& o) { o.anchorkv_seed = -1; }, "anchorkv_seed");
  EXPECT_EQ(test_support::option_error<AnchorKvOptions>(
                "anchorkv", [](AnchorKvOptions&) {}, 64),
            "accepted");
}

}  // namespace
}  // namespace veloxquant
