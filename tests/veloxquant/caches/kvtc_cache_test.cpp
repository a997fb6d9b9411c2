// kvtc against references written from its card (docs/methods/kvtc.md): the DP's widths against
// an exhaustive search of every allocation on small cases; given the basis and the per-component
// (step, lo) the cache saved, each latent component is coded as clamp(round((z - lo) / step), 0,
// 2^b - 1) and comes back as code * step + lo (0-bit components as 0); nbytes against the layout;
// attention against brute force over the returned rows; the entropy-coded size against the
// order-0 entropy of the codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "base/error.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/latent_reference.h"
#include "support/option_error.h"
#include "veloxquant/caches/kvtc_cache.h"
#include "veloxquant/caches/latent_cache.h"
#include "veloxquant/core/rans_coder.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::low_rank_rows;
using test_support::max_abs_diff;
using test_support::token_rows;

KvtcOptions options(int budget, const std::string& choices = "0,1,2,3,4,6,8") {
  KvtcOptions o;
  o.kvtc_bit_budget = budget;
  o.kvtc_bit_choices = choices;
  return o;
}

double model_loss(const std::vector<double>& v, const std::vector<int>& bits, double beta) {
  double loss = 0;
  for (std::size_t i = 0; i < v.size(); ++i) loss += v[i] * std::pow(beta, -bits[i]);
  return loss;
}

TEST(Kvtc, TheDpMatchesAnExhaustiveSearch) {
  const std::vector<std::vector<double>> spectra = {
      {9.0, 4.0, 1.0, 0.25, 0.01}, {5.0, 5.0, 5.0, 0.1}, {100, 1, 1, 1, 1}};
  const std::vector<std::vector<int>> choice_sets = {{0, 1, 2, 3, 4, 6, 8}, {0, 2, 4}, {1, 2}};
  for (const auto& v : spectra) {
    for (const auto& choices : choice_sets) {
      for (int budget : {5, 8, 13}) {
        const int n = static_cast<int>(v.size());
        // Every assignment of a choice to every component.
        double best = 1e300;
        std::vector<int> pick(static_cast<std::size_t>(n), 0);
        bool any = false;
        while (true) {
          std::vector<int> bits(static_cast<std::size_t>(n));
          int total = 0;
          for (int i = 0; i < n; ++i)
            total += bits[static_cast<std::size_t>(i)] =
                choices[static_cast<std::size_t>(pick[static_cast<std::size_t>(i)])];
          if (total <= budget) {
            best = std::min(best, model_loss(v, bits, 3.5));
            any = true;
          }
          int i = 0;
          while (i < n && ++pick[static_cast<std::size_t>(i)] == static_cast<int>(choices.size()))
            pick[static_cast<std::size_t>(i++)] = 0;
          if (i == n) break;
        }
        if (!any) {
          EXPECT_THROW(kvtc_allocate_bits(v, choices, budget, 3.5), base::InvalidArgument);
          continue;
        }
        const std::vector<int> bits = kvtc_allocate_bits(v, choices, budget, 3.5);
        int total = 0;
        for (int b : bits) total += b;
        EXPECT_LE(total, budget);
        EXPECT_NEAR(model_loss(v, bits, 3.5), best, 1e-9 * best) << "budget " << budget;
      }
    }
  }
  // The default budget on a decaying spectrum: widths fall with the variance, the tail dropped.
  std::vector<double> v(192);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::pow(0.95, static_cast<double>(i));
  const std::vector<int> bits = kvtc_allocate_bits(v, {0, 1, 2, 3, 4, 6, 8}, 512, 3.5);
  EXPECT_TRUE(std::is_sorted(bits.rbegin(), bits.rend()));
  EXPECT_EQ(bits.back(), 0);
  EXPECT_GE(bits.front(), 4);
}

// The card's quantizer, from the codec's saved widths [1, G, 1, w] and ranges [1, G, 2, w].
test_support::LatentQuantizer kvtc_quantizer(const lm::Tensor& widths, const lm::Tensor& ranges) {
  const std::vector<float> b = widths.astype(lm::DType::F32).to_f32(), rg = ranges.to_f32();
  const int64_t w = widths.dim(3);
  return [b, rg, w](int64_t g, const std::vector<double>& z) {
    std::vector<double> out(z.size());
    for (std::size_t i = 0; i < z.size(); ++i) {
      const int bits = static_cast<int>(b[static_cast<std::size_t>(g * w) + i]);
      const float step = rg[static_cast<std::size_t>(g * 2 * w) + i],
                  lo = rg[static_cast<std::size_t>(g * 2 * w + w) + i];
      if (bits == 0) continue;
      const float levels = static_cast<float>((1 << bits) - 1);
      const float q = std::nearbyint(std::clamp((static_cast<float>(z[i]) - lo) / step, 0.0f, levels));
      out[i] = std::fma(q, step, lo);
    }
    return out;
  };
}

TEST(Kvtc, RowsMatchTheReferenceAndTheBudgetHolds) {
  for (int budget : {40, 96, 512}) {
    // Width 48: the fit waits for 4 x 48 = 192 rows (it reads the first 192 of the 200 then stored).
    const int64_t heads = 3, d = 16, t = 260;
    const std::shared_ptr<lm::KVCache> cache = make_kvtc_cache(options(budget));
    const lm::Tensor k = low_rank_rows(heads, t, d, 10, 31), v = low_rank_rows(heads, t, d, 14, 41);
    cache->update_and_fetch(test_support::token_rows(k, 0, 150), test_support::token_rows(v, 0, 150));
    EXPECT_FALSE(dynamic_cast<const LatentCache&>(*cache).fitted());
    cache->update_and_fetch(test_support::token_rows(k, 150, 200), test_support::token_rows(v, 150, 200));
    const lm::KeysValues got =
        cache->update_and_fetch(test_support::token_rows(k, 200, t), test_support::token_rows(v, 200, t));
    const std::vector<lm::Tensor> s = cache->state();
    ASSERT_EQ(s.size(), 12u);   // codes, basis, mean, ranks per side + (widths, ranges) per side
    EXPECT_EQ(s[1].dim(1), 1);  // one head group: the layer's heads together
    for (int side = 0; side < 2; ++side) {
      const std::vector<float> widths = s[static_cast<std::size_t>(8 + 2 * side)].astype(lm::DType::F32).to_f32();
      int total = 0;
      for (float b : widths) total += static_cast<int>(b);
      EXPECT_LE(total, budget);
      EXPECT_GT(total, std::min(budget, 48) - 8);
      EXPECT_EQ(s[static_cast<std::size_t>(4 * side)].dim(3), (total + 7) / 8);  // row bytes: the packed widths
    }
    const std::vector<float> want_k = test_support::latent_reference(k, s[1], s[2], s[3], kvtc_quantizer(s[8], s[9]));
    const std::vector<float> want_v = test_support::latent_reference(v, s[5], s[6], s[7], kvtc_quantizer(s[10], s[11]));
    EXPECT_LE(max_abs_diff(got.keys.to_f32(), want_k), 1e-4f) << budget;
    EXPECT_LE(max_abs_diff(got.values.to_f32(), want_v), 1e-4f) << budget;
  }
}

TEST(Kvtc, MoreBitsLessError) {
  const int64_t heads = 3, d = 16, t = 260;
  const lm::Tensor k = low_rank_rows(heads, t, d, 16, 5);
  double previous = 1e300;
  for (int budget : {24, 64, 160}) {
    const std::shared_ptr<lm::KVCache> cache = make_kvtc_cache(options(budget));
    const std::vector<float> got = cache->update_and_fetch(k, k).keys.to_f32(), x = k.to_f32();
    double err = 0;
    for (std::size_t i = 0; i < x.size(); ++i) err += (got[i] - x[i]) * double(got[i] - x[i]);
    EXPECT_LT(err, previous) << budget;
    previous = err;
  }
}

TEST(Kvtc, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t heads = 3, d = 64, w = heads * d;
  const std::shared_ptr<lm::KVCache> cache = make_kvtc_cache(KvtcOptions{});
  const lm::Tensor k = low_rank_rows(heads, 800, d, 40, 5), v = low_rank_rows(heads, 800, d, 40, 6);
  EXPECT_EQ(cache->update_and_fetch(token_rows(k, 0, 700), token_rows(v, 0, 700)).keys.dim(2), 700);
  // Not fitted yet (768 rows): the rows as given (768-row capacity) and the codecs' (widths, ranges).
  EXPECT_EQ(cache->nbytes(), 2u * heads * 768 * d * 4 + 2 * (w * 4 + 2 * w * 4));
  cache->update_and_fetch(token_rows(k, 700, 800), token_rows(v, 700, 800));
  const auto& latent = dynamic_cast<const LatentCache&>(*cache);
  std::size_t want = 0;
  for (const LatentSide* side : {&latent.keys_side(), &latent.values_side()}) {
    const int64_t row = side->codes.dim(3), r = side->max_rank;
    EXPECT_LE(row, 64);  // 512 bits
    EXPECT_GE(row, 60);
    want += 1024 * row + r * w * 4 + w * 4 + 4  // codes (256-row step), basis, mean, rank
            + w * 4 + 2 * w * 4;                // widths, (step, lo)
  }
  EXPECT_EQ(cache->nbytes(), want);
}

TEST(Kvtc, EntropyCodedBytesAreRealAndBelowThePackedCodes) {
  const int64_t heads = 3, d = 64, t = 2000;
  const std::shared_ptr<lm::KVCache> cache = make_kvtc_cache(KvtcOptions{});
  EXPECT_EQ(kvtc_entropy_coded_bytes(*cache), 0u);
  cache->update_and_fetch(low_rank_rows(heads, t, d, 40, 7), low_rank_rows(heads, t, d, 40, 8));
  const std::size_t coded = kvtc_entropy_coded_bytes(*cache);
  const auto& latent = dynamic_cast<const LatentCache&>(*cache);
  const std::size_t packed =
      static_cast<std::size_t>(t * (latent.keys_side().codes.dim(3) + latent.values_side().codes.dim(3)));
  EXPECT_GT(coded, 0u);
  // Uniform codes of roughly Gaussian latents are far from uniform symbols: coding saves bytes
  // even with a frequency table and a final state per (component) stream.
  EXPECT_LT(coded, packed) << coded << " coded vs " << packed << " packed";
  EXPECT_GT(coded, packed / 3);
  const std::shared_ptr<lm::KVCache> other = make_palu_cache(PaluOptions{});
  EXPECT_THROW(kvtc_entropy_coded_bytes(*other), base::InvalidArgument);
}

TEST(Kvtc, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 3, hq = 9, d = 64;
  const test_support::RowMaker rows = [](int64_t h, int64_t n, int64_t dim, uint64_t s) {
    return low_rank_rows(h, n, dim, 20, s);
  };
  KvtcOptions integer_keys;
  integer_keys.kvtc_integer_keys = true;
  for (const KvtcOptions& o : {KvtcOptions{}, options(100, "0,2,4"), integer_keys}) {
    // Width 192: the fit waits for 768 rows — the first chunks attend over rows as given.
    for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{800, 1, 9}, std::vector<int64_t>{500, 300, 1}}) {
      const std::shared_ptr<lm::KVCache> fused = make_kvtc_cache(o), plain = make_kvtc_cache(o);
      const std::vector<float> worst =
          test_support::fused_vs_fetched(*fused, *plain, heads, hq, d, chunks, 700, rows, rows);
      // The f32 latent scores stay below 1e-3; keys scored from their codes with 16-bit rounded
      // queries (kvtc_integer_keys) reach ~1.1e-3 here.
      const float limit = o.kvtc_integer_keys ? 2e-3f : 1e-3f;
      for (std::size_t c = 0; c < chunks.size(); ++c) EXPECT_LE(worst[c], limit) << "chunk " << c;
    }
  }
}

// A prefill chunk attends over the rows rebuilt in f32 as update_and_fetch returns them, so
// it matches attention over the fetched rows up to the driver's order of summation; a decode
// step stays in the latent space (scores <U q, z>, the same up to rounding).
TEST(Kvtc, PrefillChunksAttendOverTheFetchedRows) {
  const int64_t heads = 3, hq = 9, d = 64;
  const std::shared_ptr<lm::KVCache> fused = make_kvtc_cache(KvtcOptions{}), plain = make_kvtc_cache(KvtcOptions{});
  const std::vector<int64_t> chunks = {800, 200, 1, 2};
  const std::vector<float> worst = test_support::fused_vs_fetched(*fused, *plain, heads, hq, d, chunks, 900);
  const auto& latent = dynamic_cast<const LatentCache&>(*fused);
  ASSERT_TRUE(latent.fitted());
  EXPECT_TRUE(latent.rebuild_rows_for(hq, 200));
  EXPECT_FALSE(latent.rebuild_rows_for(hq, 1));
  EXPECT_FALSE(latent.rebuild_rows_for(hq, 2));
  // f32 sums over ~1,000 rows in another order than the reference's double ones.
  EXPECT_LE(worst[0], 2e-5f);
  EXPECT_LE(worst[1], 2e-5f);
  EXPECT_LE(worst[2], 1e-3f) << worst[2];
  EXPECT_LE(worst[3], 1e-3f) << worst[3];
}

TEST(Kvtc, TrimAndStateRoundTrip) {
  const int64_t heads = 3, d = 16;
  const lm::Tensor k = low_rank_rows(heads, 120, d, 6, 17), v = low_rank_rows(heads, 120, d, 6, 18);
  const std::shared_ptr<lm::KVCache> cache = make_kvtc_cache(options(64));
  cache->update_and_fetch(low_rank_rows(heads, 200, d, 6, 19), low_rank_rows(heads, 200, d, 6, 20));
  cache->trim(200 - 100);
  ASSERT_TRUE(dynamic_cast<const LatentCache&>(*cache).fitted());
  const std::vector<float> before =
      cache->update_and_fetch(test_support::token_rows(k, 100, 110), test_support::token_rows(v, 100, 110))
          .keys.to_f32();
  EXPECT_EQ(cache->trim(10), 10);
  const std::shared_ptr<lm::KVCache> restored = kvtc_method().make_restorable();
  restored->from_state(cache->state(), cache->meta_state());
  EXPECT_EQ(restored->meta_state(), cache->meta_state());
  const lm::KeysValues a =
      cache->update_and_fetch(test_support::token_rows(k, 100, 110), test_support::token_rows(v, 100, 110));
  const lm::KeysValues b =
      restored->update_and_fetch(test_support::token_rows(k, 100, 110), test_support::token_rows(v, 100, 110));
  EXPECT_EQ(a.keys.to_f32(), before);  // trimmed and fed again: as if never trimmed
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(cache->clone()
                ->update_and_fetch(test_support::token_rows(k, 110, 111), test_support::token_rows(v, 110, 111))
                .keys.to_f32(),
            restored->update_and_fetch(test_support::token_rows(k, 110, 111), test_support::token_rows(v, 110, 111))
                .keys.to_f32());
  std::vector<std::string> bad = cache->meta_state();
  bad[1] = "0,9";
  EXPECT_THROW(kvtc_method().make_restorable()->from_state(cache->state(), bad), base::FormatError);
}

TEST(Kvtc, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(KvtcOptions&)>& change) {
    return test_support::option_error("kvtc", change);
  };
  EXPECT_NE(message([](KvtcOptions& o) { o.kvtc_bit_budget = 0; }).find("kvtc_bit_budget"), std::string::npos);
  EXPECT_NE(message([](KvtcOptions& o) { o.kvtc_beta = 1.0; }).find("kvtc_beta"), std::string::npos);
  EXPECT_NE(message([](KvtcOptions& o) { o.kvtc_bit_choices = "0,9"; }).find("bad entry '9'"), std::string::npos);
  EXPECT_NE(message([](KvtcOptions& o) { o.kvtc_bit_choices = "2,1"; }).find("kvtc_bit_choices"), std::string::npos);
  EXPECT_NE(message([](KvtcOptions& o) { o.kvtc_bit_choices = ""; }).find("kvtc_bit_choices"), std::string::npos);
  EXPECT_EQ(message([](KvtcOptions& o) { o.kvtc_bit_choices = "0, 2, 4"; }), "accepted");
  // A budget the choices cannot meet is found at the fit (the width is known then): a clear error.
  const std::shared_ptr<lm::KVCache> cache = make_kvtc_cache(options(8, "2,4"));
  EXPECT_THROW(cache->update_and_fetch(low_rank_rows(3, 192, 16, 4, 1), low_rank_rows(3, 192, 16, 4, 2)),
               base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant
