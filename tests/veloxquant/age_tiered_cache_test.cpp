// age_tiered against an independent reference written from its card (docs/methods/age_tiered.md):
// after every call that leaves T tokens, a row of age < R is at the recent width, of age < M at the
// mid width, older at the old width; a new row is coded from its input at its tier's width, a row
// that ages into a coarser tier is re-coded from its decoded value (per-token group code of G
// channels, f16 (scale, min), round half to even).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <functional>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/caches/age_tiered_cache.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

AgeTieredOptions small_tiers(int recent, int mid, int bits_recent, int bits_mid, int bits_old, int group) {
  AgeTieredOptions o;
  o.age_recent_boundary = recent;
  o.age_mid_boundary = mid;
  o.age_bits_recent = bits_recent;
  o.age_bits_mid = bits_mid;
  o.age_bits_old = bits_old;
  o.age_group_size = group;
  return o;
}

// One row quantize-dequantized per token in channel groups of `group` at `bits`.
void reference_row(float* row, int64_t d, int64_t group, int bits) {
  for (int64_t c0 = 0; c0 < d; c0 += group) {
    const int64_t c1 = std::min(d, c0 + group);
    const std::vector<float> q = reference_group(std::vector<float>(row + c0, row + c1), bits);
    std::copy(q.begin(), q.end(), row + c0);
  }
}

// The reference cache of one head's rows ([T, d] each for keys and values), fed in `chunks`.
struct ReferenceTiers {
  AgeTieredOptions o;
  int64_t d;
  std::vector<std::vector<float>> rows;  // current (quantized) value of every row
  std::vector<int> tier;                 // 0 old, 1 mid, 2 recent

  int tier_of(int64_t p, int64_t total) const {
    const int64_t age = total - 1 - p;
    return age < o.age_recent_boundary ? 2 : age < o.age_mid_boundary ? 1 : 0;
  }
  int bits_of(int t) const { return t == 2 ? o.age_bits_recent : t == 1 ? o.age_bits_mid : o.age_bits_old; }
  void feed(const float* x, int64_t n) {
    const int64_t total = static_cast<int64_t>(rows.size()) + n;
    for (std::size_t p = 0; p < rows.size(); ++p) {  // aging rows are re-coded from what they hold
      const int t = tier_of(static_cast<int64_t>(p), total);
      if (t != tier[p]) {
        reference_row(rows[p].data(), d, o.age_group_size, bits_of(t));
        tier[p] = t;
      }
    }
    for (int64_t i = 0; i < n; ++i) {  // new rows straight from the input, at their tier
      const int t = tier_of(static_cast<int64_t>(rows.size()), total);
      rows.emplace_back(x + i * d, x + (i + 1) * d);
      reference_row(rows.back().data(), d, o.age_group_size, bits_of(t));
      tier.push_back(t);
    }
  }
};

TEST(AgeTiered, MatchesTheReferenceBitExactly) {
  const int64_t heads = 2;
  for (const auto& [o, d, chunks] :
       {std::tuple{small_tiers(8, 24, 8, 4, 2, 8), int64_t{16}, std::vector<int64_t>{5, 1, 1, 30, 2, 1, 1, 1}},
        std::tuple{small_tiers(8, 24, 8, 4, 2, 8), int64_t{20}, std::vector<int64_t>{40, 3}},
        std::tuple{small_tiers(0, 10, 8, 3, 1, 6), int64_t{16}, std::vector<int64_t>{4, 9, 1, 1, 12}},
        std::tuple{small_tiers(5, 5, 6, 4, 3, 32), int64_t{64}, std::vector<int64_t>{3, 3, 3, 20}},
        std::tuple{small_tiers(128, 1024, 8, 4, 2, 32), int64_t{64}, std::vector<int64_t>{100, 1, 1000, 1, 1}}}) {
    int64_t t = 0;
    for (int64_t n : chunks) t += n;
    const lm::Tensor k = test_support::random_kv(1, heads, t, d, 71, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 72, lm::DType::F32);
    AgeTieredCache cache(o);
    std::vector<ReferenceTiers> ref_k(heads, ReferenceTiers{o, d, {}, {}}), ref_v = ref_k;
    const std::vector<float> kf = k.to_f32(), vf = v.to_f32();
    int64_t fed = 0;
    lm::KeysValues got;
    for (int64_t n : chunks) {
      got =
          cache.update_and_fetch(test_support::token_rows(k, fed, fed + n), test_support::token_rows(v, fed, fed + n));
      for (int64_t h = 0; h < heads; ++h) {
        ref_k[h].feed(kf.data() + (h * t + fed) * d, n);
        ref_v[h].feed(vf.data() + (h * t + fed) * d, n);
      }
      fed += n;
    }
    const std::array<int64_t, 3> rows = cache.tier_rows(t);
    EXPECT_EQ(cache.tier(0).rows() + cache.tier(1).rows() + cache.tier(2).rows(), t);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(cache.tier(i).rows(), rows[static_cast<std::size_t>(i)]);
    const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32();
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t p = 0; p < t; ++p) {
        for (int64_t c = 0; c < d; ++c) {
          const std::size_t at = static_cast<std::size_t>((h * t + p) * d + c);
          ASSERT_EQ(gk[at], ref_k[h].rows[p][c]) << "key head " << h << " row " << p << " channel " << c << " d " << d;
          ASSERT_EQ(gv[at], ref_v[h].rows[p][c]) << "value head " << h << " row " << p << " channel " << c;
        }
      }
    }
  }
}

TEST(AgeTiered, AgingIntoCoarserTiersCostsAlmostNothingOverDirectCoding) {
  // Nested grids: 255 = 15 * 17 and 15 = 3 * 5, so the 4-bit code of a decoded 8-bit row and the
  // 2-bit code of a decoded 4-bit row are those of the original row but for the f16 rounding of
  // the stored (scale, min). Rows that went 8 -> 4 -> 2 one decode step at a time against the same
  // rows coded once at 2 bits.
  const int64_t d = 64, group = 32, t = 400;
  const AgeTieredOptions o = small_tiers(64, 192, 8, 4, 2, group);
  const lm::Tensor k = test_support::random_kv(1, 1, t, d, 90, lm::DType::F32);
  AgeTieredCache cache(o);
  std::vector<float> got;
  for (int64_t p = 0; p < t; ++p) {
    got = cache.update_and_fetch(test_support::token_rows(k, p, p + 1), test_support::token_rows(k, p, p + 1))
              .keys.to_f32();
  }
  const std::vector<float> x = k.to_f32();
  const int64_t old_rows = t - o.age_mid_boundary;
  double err_aged = 0, err_direct = 0;
  int64_t differ = 0;
  for (int64_t p = 0; p < old_rows; ++p) {
    std::vector<float> direct(x.begin() + p * d, x.begin() + (p + 1) * d);
    reference_row(direct.data(), d, group, 2);
    for (int64_t c = 0; c < d; ++c) {
      const double xc = x[static_cast<std::size_t>(p * d + c)];
      const double a = got[static_cast<std::size_t>(p * d + c)], b = direct[static_cast<std::size_t>(c)];
      err_aged += (a - xc) * (a - xc);
      err_direct += (b - xc) * (b - xc);
      // A different code moves a value by a whole 2-bit step (a third of the group's range, ~1.5
      // here); the f16 rounding of a re-derived scale moves it by under a thousandth of that.
      differ += std::fabs(a - b) > 0.05 ? 1 : 0;
    }
  }
  const double elements = static_cast<double>(old_rows * d);
  EXPECT_LE(err_aged, err_direct * 1.001) << "aged MSE " << err_aged / elements << " direct " << err_direct / elements;
  EXPECT_LE(static_cast<double>(differ) / elements, 0.001) << differ << " of " << elements << " codes differ";
  std::printf("aged MSE %.6g direct %.6g, %lld of %.0f codes differ\n", err_aged / elements, err_direct / elements,
              static_cast<long long>(differ), elements);
}

TEST(AgeTiered, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "age_tiered";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 128 recent at 8 bits, to age 1024 at 4, then 2
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 tokens: 128 recent rows in 128 + 32 buffer rows (the bound plus the slide slack), 172 mid
  // rows in one 256-row step, none old. A row is packed_words(64, b) u32 words + 2 groups x
  // (scale, min) f16: 8 bits 64 + 8, 4 bits 32 + 8.
  const std::size_t heads = b * h;
  const std::size_t recent = heads * 160 * 2 * (64 + 8), mid = heads * 256 * 2 * (32 + 8);
  EXPECT_EQ(cache->nbytes(), recent + mid);
  // Aging on to 1,300 tokens one call at a time: 276 old rows at 2 bits (16 + 8 bytes) in 512 rows,
  // mid 896 rows in 896 + 32, recent 128 in 160.
  auto& tiered = dynamic_cast<AgeTieredCache&>(*cache);
  for (int i = 0; i < 10; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, 20 + i),
                            test_support::random_kv(b, h, 100, d, 40 + i));
  }
  EXPECT_EQ(tiered.tier(0).rows(), 276);
  EXPECT_EQ(tiered.tier(1).rows(), 896);
  EXPECT_EQ(tiered.tier(2).rows(), 128);
  EXPECT_EQ(cache->nbytes(), heads * (512 * 2 * (16 + 8) + 928 * 2 * (32 + 8) + 160 * 2 * (64 + 8)));
}

TEST(AgeTiered, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6, d = 64;
  for (const AgeTieredOptions& o :
       {small_tiers(16, 64, 8, 4, 2, 32), small_tiers(0, 40, 8, 3, 1, 16), AgeTieredOptions{}}) {
    AgeTieredCache fused(o), plain(o);
    const std::vector<int64_t> chunks{150, 17, 1, 1, 70};
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 700);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      EXPECT_LE(worst[c], 1e-3f) << "recent " << o.age_recent_boundary << " mid " << o.age_mid_boundary << " chunk "
                                 << chunks[c];
    }
  }
}

TEST(AgeTiered, StateThatDisagreesWithItsOffsetIsRefused) {
  AgeTieredCache cache(small_tiers(8, 24, 8, 4, 2, 8));
  cache.update_and_fetch(test_support::random_kv(1, 2, 40, 16, 1), test_support::random_kv(1, 2, 40, 16, 2));
  std::vector<std::string> meta = cache.meta_state();
  meta[8] = "41";  // offset: the tiers hold 16 / 16 / 8 rows, 41 tokens would put 17 in the old tier
  AgeTieredCache restored(AgeTieredOptions{});
  try {
    restored.from_state(cache.state(), meta);
    FAIL() << "accepted";
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("2-bit tier holds 16 rows, offset 41 puts 17 there"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(restored.offset(), 0) << "a refused state leaves the cache as it was";
}

TEST(AgeTiered, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(AgeTieredOptions&)>& change) {
    return test_support::option_error("age_tiered", change);
  };
  EXPECT_NE(message([](AgeTieredOptions& o) { o.age_bits_recent = 0; }).find("age_bits_recent"), std::string::npos);
  EXPECT_NE(message([](AgeTieredOptions& o) { o.age_bits_mid = 9; }).find("age_bits_mid"), std::string::npos);
  EXPECT_NE(message([](AgeTieredOptions& o) { o.age_bits_old = -1; }).find("age_bits_old"), std::string::npos);
  EXPECT_NE(message([](AgeTieredOptions& o) { o.age_group_size = 0; }).find("age_group_size"), std::string::npos);
  EXPECT_NE(message([](AgeTieredOptions& o) { o.age_recent_boundary = -1; }).find("age_recent_boundary"),
            std::string::npos);
  EXPECT_NE(
      message([](AgeTieredOptions& o) { o.age_mid_boundary = 100; }).find("must not be below age_recent_boundary"),
      std::string::npos);
  EXPECT_EQ(message([](AgeTieredOptions& o) { o.age_mid_boundary = 128; }), "accepted");
}

}  // namespace
}  // namespace veloxquant
