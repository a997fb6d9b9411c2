// palu against references written from its card (docs/methods/palu.md): given the basis the
// cache saved, each token's latent is quantized per token — the leading ceil(f r) components at
// palu_hi_bit, the rest at palu_lo_bit, groups of palu_group_size with an fp16 (scale, min) — and
// the row comes back as mu + U^T z'. The basis is held to what a PCA must be (orthonormal, the
// energy rank), attention to brute force over the returned rows, nbytes to the layout's formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "base/error.h"
#include "base/half.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/latent_reference.h"
#include "support/option_error.h"
#include "veloxquant/caches/latent_cache.h"
#include "veloxquant/caches/palu_cache.h"
#include "veloxquant/core/linalg.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::low_rank_rows;
using test_support::max_abs_diff;

PaluOptions options(std::optional<int> rank, int groups = 4, bool quantize_values = true) {
  PaluOptions o;
  o.palu_rank = rank;
  o.palu_n_head_groups = groups;
  o.palu_quantize_values = quantize_values;
  return o;
}

// The card's group code of one group (KIVI's rule: fp16 min, fp16 scale, codes rounded half to even).
void reference_group(std::vector<double>& z, int64_t first, int64_t n, int bits) {
  float lo = static_cast<float>(z[static_cast<std::size_t>(first)]), hi = lo;
  for (int64_t i = first; i < first + n; ++i) {
    lo = std::min(lo, static_cast<float>(z[static_cast<std::size_t>(i)]));
    hi = std::max(hi, static_cast<float>(z[static_cast<std::size_t>(i)]));
  }
  const float levels = static_cast<float>((1 << bits) - 1);
  const float min16 = base::f16_to_f32(base::f32_to_f16(lo));
  uint16_t sh = base::f32_to_f16(std::max((hi - min16) / levels, 1e-8f));
  if ((sh & 0x7fff) == 0) sh = 1;
  const float scale = base::f16_to_f32(sh);
  for (int64_t i = first; i < first + n; ++i) {
    const float q =
        std::clamp(std::nearbyint((static_cast<float>(z[static_cast<std::size_t>(i)]) - min16) / scale), 0.0f, levels);
    z[static_cast<std::size_t>(i)] = q * scale + min16;
  }
}

test_support::LatentQuantizer palu_quantizer(const PaluOptions& o, bool values) {
  return [o, values](int64_t, const std::vector<double>& latent) {
    std::vector<double> z = latent;
    const int64_t r = static_cast<int64_t>(z.size());
    if (values && !o.palu_quantize_values) {
      for (double& x : z) x = base::f16_to_f32(base::f32_to_f16(static_cast<float>(x)));
      return z;
    }
    const int64_t hi = static_cast<int64_t>(std::ceil(o.palu_hi_fraction * double(r) - 1e-9));
    for (int64_t at = 0; at < hi; at += o.palu_group_size)
      reference_group(z, at, std::min<int64_t>(o.palu_group_size, hi - at), o.palu_hi_bit);
    for (int64_t at = hi; at < r; at += o.palu_group_size)
      reference_group(z, at, std::min<int64_t>(o.palu_group_size, r - at), o.palu_lo_bit);
    return z;
  };
}

TEST(Palu, RowsMatchTheReferenceGivenTheBasis) {
  for (const PaluOptions& o :
       {options(std::nullopt), options(12, 1), options(40, 3, false), options(std::nullopt, 2)}) {
    const int64_t heads = 3, d = 16, t = 90;
    const std::shared_ptr<lm::KVCache> cache = make_palu_cache(o);
    const lm::Tensor k = low_rank_rows(heads, t, d, 6, 11), v = low_rank_rows(heads, t, d, 9, 21);
    // Two calls: the fit happens when the second brings the cache to 64+ rows; more rows after.
    cache->update_and_fetch(test_support::token_rows(k, 0, 30), test_support::token_rows(v, 0, 30));
    cache->update_and_fetch(test_support::token_rows(k, 30, 80), test_support::token_rows(v, 30, 80));
    const lm::KeysValues got =
        cache->update_and_fetch(test_support::token_rows(k, 80, t), test_support::token_rows(v, 80, t));
    const std::vector<lm::Tensor> s = cache->state();
    ASSERT_EQ(s.size(), 10u);  // codes, basis, mean, ranks per side + the codecs' ranks
    const std::vector<float> want_k = test_support::latent_reference(k, s[1], s[2], s[3], palu_quantizer(o, false));
    const std::vector<float> want_v = test_support::latent_reference(v, s[5], s[6], s[7], palu_quantizer(o, true));
    EXPECT_LE(max_abs_diff(got.keys.to_f32(), want_k), 1e-4f) << o.palu_n_head_groups;
    EXPECT_LE(max_abs_diff(got.values.to_f32(), want_v), 1e-4f) << o.palu_n_head_groups;
    // The cache keeps the codes, not the rows: the reconstruction is close but not exact.
    EXPECT_GT(max_abs_diff(got.keys.to_f32(), k.to_f32()), 1e-5f);
    double err = 0, energy = 0;
    const std::vector<float> gk = got.keys.to_f32(), xk = k.to_f32();
    for (std::size_t i = 0; i < xk.size(); ++i) {
      err += (gk[i] - xk[i]) * double(gk[i] - xk[i]);
      energy += (xk[i] - 0.3) * (xk[i] - 0.3);
    }
    EXPECT_LT(err / energy, 0.15);  // the energy threshold drops ~10% of the variance, quantization a little more
  }
}

TEST(Palu, TheBasisIsAnOrthonormalPcaWithTheEnergyRank) {
  const int64_t heads = 3, d = 16, t = 80;
  const PaluOptions o = options(std::nullopt);
  const std::shared_ptr<lm::KVCache> cache = make_palu_cache(o);
  const lm::Tensor k = low_rank_rows(heads, t, d, 5, 3);
  cache->update_and_fetch(k, low_rank_rows(heads, t, d, 5, 4));
  const auto& side = dynamic_cast<const LatentCache&>(*cache).keys_side();
  EXPECT_EQ(dynamic_cast<const LatentCache&>(*cache).head_groups(), 3);  // 4 asked, 3 heads
  const std::vector<float> x = k.to_f32();
  for (int64_t g = 0; g < 3; ++g) {
    const linalg::Pca p = linalg::pca(x.data() + g * t * d, t, d, true);
    const int64_t r = side.rank(0, g);
    EXPECT_EQ(r, linalg::energy_rank_of(p.variance, 0.90));
    EXPECT_LE(r, 5);
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double(side.basis_row(0, g, i)[c]) * side.basis_row(0, g, j)[c];
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5);
      }
    }
  }
}

TEST(Palu, HeadGroupsAreTheLargestDivisorAtMostTheAskedCount) {
  const std::pair<int64_t, int> cases[] = {{3, 4}, {3, 2}, {3, 1}, {4, 2}, {4, 3}, {6, 4}};
  const int64_t want[] = {3, 1, 1, 2, 2, 3};
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const auto [heads, asked] = cases[i];
    const std::shared_ptr<lm::KVCache> cache = make_palu_cache(options(4, asked));
    cache->update_and_fetch(low_rank_rows(heads, 64, 8, 3, 1), low_rank_rows(heads, 64, 8, 3, 2));
    EXPECT_EQ(dynamic_cast<const LatentCache&>(*cache).head_groups(), want[i]) << heads << " heads, " << asked;
  }
}

TEST(Palu, BytesAreTheLayoutAndReallyAllocated) {
  // Rank 16 at the defaults: 4 hi components at 4 bits (4 + 2 bytes), 12 lo at 2 bits (4 + 3).
  EXPECT_EQ(palu_row_bytes(PaluOptions{}, 16, false), 13);
  EXPECT_EQ(palu_row_bytes(PaluOptions{}, 64, false), (4 + 8) + (4 + 8) + (4 + 4));  // 16 hi; 48 lo = 32 + 16
  EXPECT_EQ(palu_row_bytes(options(16, 4, false), 16, true), 32);
  const int64_t heads = 3, d = 64, groups = 3;
  const std::shared_ptr<lm::KVCache> cache = make_palu_cache(options(16));
  const lm::Tensor k = low_rank_rows(heads, 40, d, 20, 5), v = low_rank_rows(heads, 40, d, 20, 6);
  cache->update_and_fetch(k, v);
  // Before the fit: the rows as given (f32) and the codecs' rank slots.
  EXPECT_EQ(cache->nbytes(), 2u * heads * 256 * d * 4 + 2 * groups * 4);
  cache->update_and_fetch(k, v);  // 80 rows: fitted
  const std::size_t side = groups * 256 * 13 + groups * 16 * d * 4 + groups * d * 4 + groups * 4 + groups * 4;
  EXPECT_EQ(cache->nbytes(), 2 * side);
}

TEST(Palu, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 3, hq = 9, d = 64;
  const test_support::RowMaker rows = [](int64_t h, int64_t n, int64_t dim, uint64_t s) {
    return low_rank_rows(h, n, dim, 12, s);
  };
  // The plane path reads every width 1/2/4/8 in octets (partial ones too); 3 bits take the decode.
  PaluOptions widths = options(std::nullopt);
  widths.palu_hi_bit = 8;
  widths.palu_lo_bit = 1;
  widths.palu_group_size = 10;
  PaluOptions three = options(20, 1);
  three.palu_lo_bit = 3;
  for (const PaluOptions& o : {options(std::nullopt), options(24, 1), options(std::nullopt, 4, false), widths, three}) {
    for (const std::vector<int64_t>& chunks :
         {std::vector<int64_t>{100, 17, 1, 1, 40}, std::vector<int64_t>{10, 30, 30, 1, 2}}) {
      const std::shared_ptr<lm::KVCache> fused = make_palu_cache(o), plain = make_palu_cache(o);
      const std::vector<float> worst =
          test_support::fused_vs_fetched(*fused, *plain, heads, hq, d, chunks, 900, rows, rows);
      for (std::size_t c = 0; c < chunks.size(); ++c) EXPECT_LE(worst[c], 1e-3f) << "chunk " << c;
    }
  }
}

TEST(Palu, TrimEndsTheRowsAndAnEmptyCacheFitsAgain) {
  const int64_t heads = 3, d = 16;
  const lm::Tensor k = low_rank_rows(heads, 120, d, 6, 7), v = low_rank_rows(heads, 120, d, 6, 8);
  const std::shared_ptr<lm::KVCache> trimmed = make_palu_cache(PaluOptions{}),
                                     straight = make_palu_cache(PaluOptions{});
  trimmed->update_and_fetch(test_support::token_rows(k, 0, 100), test_support::token_rows(v, 0, 100));
  straight->update_and_fetch(test_support::token_rows(k, 0, 100), test_support::token_rows(v, 0, 100));
  EXPECT_EQ(trimmed->trim(30), 30);
  EXPECT_EQ(trimmed->offset(), 70);
  // Codes are per token: the kept rows are what they were, and new rows follow as if never trimmed.
  const lm::KeysValues a =
      trimmed->update_and_fetch(test_support::token_rows(k, 70, 120), test_support::token_rows(v, 70, 120));
  straight->trim(30);
  const lm::KeysValues b =
      straight->update_and_fetch(test_support::token_rows(k, 70, 120), test_support::token_rows(v, 70, 120));
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(trimmed->trim(500), 120);
  EXPECT_TRUE(trimmed->empty());
  EXPECT_FALSE(dynamic_cast<const LatentCache&>(*trimmed).fitted());
  const lm::KeysValues c =
      trimmed->update_and_fetch(test_support::token_rows(k, 0, 10), test_support::token_rows(v, 0, 10));
  EXPECT_EQ(c.keys.to_f32(), test_support::token_rows(k, 0, 10).to_f32());  // exact again until the next fit
}

TEST(Palu, StateRoundTripsAndTheRestoredCacheContinues) {
  const int64_t heads = 3, d = 16;
  const lm::Tensor k = low_rank_rows(heads, 110, d, 6, 9), v = low_rank_rows(heads, 110, d, 6, 10);
  for (int64_t first : {20, 100}) {  // before and after the fit
    const std::shared_ptr<lm::KVCache> cache = make_palu_cache(options(std::nullopt, 1, false));
    cache->update_and_fetch(test_support::token_rows(k, 0, first), test_support::token_rows(v, 0, first));
    const std::shared_ptr<lm::KVCache> restored = palu_method().make_restorable();
    restored->from_state(cache->state(), cache->meta_state());
    EXPECT_EQ(restored->offset(), first);
    EXPECT_EQ(restored->meta_state(), cache->meta_state());
    const std::shared_ptr<lm::KVCache> copy = cache->clone();
    const lm::KeysValues a =
        cache->update_and_fetch(test_support::token_rows(k, first, 110), test_support::token_rows(v, first, 110));
    const lm::KeysValues b =
        restored->update_and_fetch(test_support::token_rows(k, first, 110), test_support::token_rows(v, first, 110));
    const lm::KeysValues c =
        copy->update_and_fetch(test_support::token_rows(k, first, 110), test_support::token_rows(v, first, 110));
    EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
    EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
    EXPECT_EQ(a.keys.to_f32(), c.keys.to_f32());
  }
  const std::shared_ptr<lm::KVCache> broken = palu_method().make_restorable();
  EXPECT_THROW(broken->from_state({}, {"None"}), base::FormatError);
}

TEST(Palu, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(PaluOptions&)>& change) {
    return test_support::option_error("palu", change);
  };
  EXPECT_NE(message([](PaluOptions& o) { o.palu_rank = 0; }).find("palu_rank"), std::string::npos);
  EXPECT_NE(message([](PaluOptions& o) { o.palu_energy_threshold = 0; }).find("palu_energy_threshold"),
            std::string::npos);
  EXPECT_NE(message([](PaluOptions& o) { o.palu_n_head_groups = 0; }).find("palu_n_head_groups"), std::string::npos);
  EXPECT_NE(message([](PaluOptions& o) { o.palu_hi_bit = 9; }).find("palu_hi_bit"), std::string::npos);
  EXPECT_NE(message([](PaluOptions& o) { o.palu_lo_bit = 0; }).find("palu_lo_bit"), std::string::npos);
  EXPECT_NE(message([](PaluOptions& o) { o.palu_hi_fraction = 1.5; }).find("palu_hi_fraction"), std::string::npos);
  EXPECT_NE(message([](PaluOptions& o) { o.palu_group_size = 0; }).find("palu_group_size"), std::string::npos);
  EXPECT_EQ(message([](PaluOptions& o) { o.palu_rank = 8; }), "accepted");
}

}  // namespace
}  // namespace veloxquant
