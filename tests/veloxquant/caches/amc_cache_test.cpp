// amc against a reference written from its card (docs/methods/amc.md): per complete block of G
// tokens the keys' L1 magnitudes rank the tokens (ties to the earlier one); the top
// round(k_high G) come back as f16, the next round(k_mid G) as mean + sum z_i c_i with r_mid = ceil(d/3)
// PCA coordinates quantized per token at 8 bits, the rest with r_low = d/16 at 4 bits; the
// incomplete block comes back as given. The bases are held to what a centred PCA must give,
// computed here by brute force from the prompt's rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "base/error.h"
#include "lm/cache/prompt_cache_file.h"
#include "support/allocation_counter.h"
#include "support/fused_vs_fetched.h"
#include "support/group_code_reference.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "veloxquant/caches/amc_cache.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using cache_rows::row_ptr;

// Rows with a spread of magnitudes (so the tiers differ) and a low-rank structure plus noise.
lm::Tensor structured_rows(int64_t heads, int64_t t, int64_t d, uint64_t seed) {
  const std::vector<float> dirs = test_support::random_kv(1, heads, 6, d, seed, lm::DType::F32).to_f32();
  const std::vector<float> coef = test_support::random_kv(1, heads, t, 6, seed + 1, lm::DType::F32).to_f32();
  const std::vector<float> noise = test_support::random_kv(1, heads, t, d, seed + 2, lm::DType::F32).to_f32();
  std::vector<float> x(static_cast<std::size_t>(heads * t * d));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < t; ++r) {
      const double gain = 0.5 + static_cast<double>((r * 7 + h) % 11) / 5.0;
      for (int64_t c = 0; c < d; ++c) {
        double v = 0.1 + 0.05 * noise[static_cast<std::size_t>((h * t + r) * d + c)];
        for (int64_t k = 0; k < 6; ++k) {
          v += gain * coef[static_cast<std::size_t>((h * t + r) * 6 + k)] / double(1 + k) *
               dirs[static_cast<std::size_t>((h * 6 + k) * d + c)];
        }
        x[static_cast<std::size_t>((h * t + r) * d + c)] = static_cast<float>(v);
      }
    }
  }
  return lm::Tensor::from_f32(x, {1, heads, t, d}, lm::DType::F32);
}

// Quantize-dequantize of a latent vector per token: groups of `group` coordinates at `bits`.
std::vector<float> reference_token(const std::vector<float>& z, int64_t group, int bits) {
  std::vector<float> out;
  for (std::size_t first = 0; first < z.size(); first += static_cast<std::size_t>(group)) {
    const std::vector<float> part(z.begin() + static_cast<std::ptrdiff_t>(first),
                                  z.begin() + static_cast<std::ptrdiff_t>(std::min(z.size(), first + group)));
    const std::vector<float> q = test_support::reference_group(part, bits);
    out.insert(out.end(), q.begin(), q.end());
  }
  return out;
}

// x through a table (mean + first r directions) at `bits`.
std::vector<float> reference_latent(const lm::Tensor& table, int64_t h, const float* x, int64_t d, int64_t r,
                                    int64_t group, int bits) {
  const float* mean = row_ptr<float>(table, 0, h, 0);
  std::vector<float> z;
  for (int64_t i = 0; i < r; ++i) {
    const float* c = row_ptr<float>(table, 0, h, 1 + i);
    double dot = 0.0;
    for (int64_t e = 0; e < d; ++e) dot += double(c[e]) * (x[e] - mean[e]);
    z.push_back(static_cast<float>(dot));
  }
  z = reference_token(z, group, bits);
  std::vector<float> out(mean, mean + d);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t e = 0; e < d; ++e) out[e] += z[i] * row_ptr<float>(table, 0, h, 1 + i)[e];
  }
  return out;
}

AmcOptions options(double k_high = 0.2, double k_mid = 0.3, int group = 32) {
  AmcOptions o;
  o.amc_k_high = k_high;
  o.amc_k_mid = k_mid;
  o.amc_group_size = group;
  return o;
}

TEST(AmcCache, TierShapesAreFractionsOfTheHeadDim) {
  EXPECT_EQ(amc_tier_shape(AmcTier::kHigh, 128).rank, 128);
  EXPECT_EQ(amc_tier_shape(AmcTier::kHigh, 128).bits, 16);
  EXPECT_EQ(amc_tier_shape(AmcTier::kMid, 128).rank, 43);  // the original's numbers at d = 128
  EXPECT_EQ(amc_tier_shape(AmcTier::kMid, 128).bits, 8);
  EXPECT_EQ(amc_tier_shape(AmcTier::kLow, 128).rank, 8);
  EXPECT_EQ(amc_tier_shape(AmcTier::kLow, 128).bits, 4);
  EXPECT_EQ(amc_tier_shape(AmcTier::kMid, 64).rank, 22);
  EXPECT_EQ(amc_tier_shape(AmcTier::kLow, 64).rank, 4);
  EXPECT_EQ(amc_tier_shape(AmcTier::kLow, 8).rank, 1);
  const AmcTierCounts def = amc_tier_counts(32, 0.2, 0.3);  // 6.4 -> 6, 9.6 -> 10
  EXPECT_EQ(def.high, 6);
  EXPECT_EQ(def.mid, 10);
  EXPECT_EQ(def.low, 16);
  const AmcTierCounts even = amc_tier_counts(10, 0.25, 0.25);  // 2.5 -> 2 (half to even)
  EXPECT_EQ(even.high, 2);
  EXPECT_EQ(even.mid, 2);
  const AmcTierCounts clamped = amc_tier_counts(4, 0.9, 0.1);  // 3.6 -> 4, nothing left for Mid
  EXPECT_EQ(clamped.high, 4);
  EXPECT_EQ(clamped.mid, 0);
  EXPECT_EQ(clamped.low, 0);
}

// The rows a tier holds for one token: High its key and value in f16, Mid and Low their rank-r
// latents at the tier's bits decoded through the cache's tables.
std::pair<std::vector<float>, std::vector<float>> expected_rows(const AmcCache& cache, AmcTier tier, int64_t h,
                                                                const float* kx, const float* vx, int64_t d,
                                                                int64_t g) {
  std::vector<float> wk, wv;
  if (tier == AmcTier::kHigh) {
    wk.reserve(static_cast<std::size_t>(d));
    wv.reserve(static_cast<std::size_t>(d));
    for (int64_t c = 0; c < d; ++c) {
      wk.push_back(test_support::f16_round(kx[c]));
      wv.push_back(test_support::f16_round(vx[c]));
    }
    return {wk, wv};
  }
  const AmcTierShape s = amc_tier_shape(tier, d);
  return {reference_latent(cache.key_table(), h, kx, d, s.rank, g, s.bits),
          reference_latent(cache.value_table(), h, vx, d, s.rank, g, s.bits)};
}

// A block's positions by descending key L1 norm, ties to the earlier position.
std::vector<int64_t> ranked_by_l1(const std::vector<float>& k, int64_t h, int64_t t, int64_t d, int64_t block,
                                  int64_t g) {
  std::vector<std::pair<double, int64_t>> ranked;
  ranked.reserve(static_cast<std::size_t>(g));
  for (int64_t r = 0; r < g; ++r) {
    const int64_t p = block * g + r;
    double l1 = 0.0;
    for (int64_t c = 0; c < d; ++c) l1 += std::fabs(double(k[(h * t + p) * d + c]));
    ranked.push_back({-l1, p});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<int64_t> order;
  order.reserve(ranked.size());
  for (const auto& r : ranked) order.push_back(r.second);
  return order;
}

// After t tokens (keys k, values v as fed; gk, gv as fetched): each block's tiers by key L1 rank
// and its fetched rows equal to the tier's reference rows, the tail past the frontier exact.
void check_against_reference(const AmcCache& cache, const AmcOptions& o, const std::vector<float>& k,
                             const std::vector<float>& v, const lm::KeysValues& got, int64_t heads, int64_t d) {
  const int64_t t = 100, g = o.amc_group_size, frontier = t / g * g;
  const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32();
  const AmcTierCounts counts = amc_tier_counts(g, o.amc_k_high, o.amc_k_mid);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t block = 0; block < frontier / g; ++block) {
      const std::vector<int64_t> ranked = ranked_by_l1(k, h, t, d, block, g);
      for (int64_t i = 0; i < g; ++i) {
        const int64_t p = ranked[i];
        const AmcTier tier = i < counts.high                ? AmcTier::kHigh
                             : i < counts.high + counts.mid ? AmcTier::kMid
                                                            : AmcTier::kLow;
        ASSERT_EQ(cache.tier_of(0, h, p), tier) << "position " << p;
        const auto [wk, wv] =
            expected_rows(cache, tier, h, k.data() + (h * t + p) * d, v.data() + (h * t + p) * d, d, g);
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_NEAR(gk[(h * t + p) * d + c], wk[c], 2e-5) << "key p " << p << " c " << c;
          ASSERT_NEAR(gv[(h * t + p) * d + c], wv[c], 2e-5) << "value p " << p << " c " << c;
        }
      }
    }
    for (int64_t p = frontier; p < t; ++p) {
      for (int64_t c = 0; c < d; ++c) ASSERT_EQ(gk[(h * t + p) * d + c], k[(h * t + p) * d + c]) << "tail exact";
    }
  }
}

TEST(AmcCache, MatchesTheReferenceAndNeverEvicts) {
  const int64_t heads = 2, d = 48;
  for (const AmcOptions& o : {options(), options(0.25, 0.25, 16), options(0.0, 1.0, 32)}) {
    AmcCache cache(o);
    std::vector<lm::Tensor> ks, vs;
    lm::KeysValues got;
    uint64_t seed = 300;
    for (int64_t n : {70, 1, 1, 25, 3}) {
      ks.push_back(structured_rows(heads, n, d, seed));
      vs.push_back(structured_rows(heads, n, d, seed + 5));
      got = cache.update_and_fetch(ks.back(), vs.back());
      seed += 10;
    }
    const int64_t t = 100, g = o.amc_group_size, frontier = t / g * g;
    EXPECT_EQ(cache.offset(), t);
    EXPECT_EQ(got.keys.dim(2), t) << "never evicts";
    EXPECT_EQ(cache.frontier(), frontier);
    const std::vector<float> k = test_support::concat_tokens_f32(ks), v = test_support::concat_tokens_f32(vs);
    check_against_reference(cache, o, k, v, got, heads, d);
    if (HasFatalFailure()) return;
  }
}

TEST(AmcCache, BasesAreTheCentredPcaOfThePrompt) {
  const int64_t heads = 2, d = 32, s = 64;
  AmcCache cache(options());
  const lm::Tensor k = structured_rows(heads, s, d, 500), v = structured_rows(heads, s, d, 510);
  cache.update_and_fetch(k, v);
  ASSERT_TRUE(cache.fitted());
  const std::vector<float> x = k.to_f32();
  const lm::Tensor& table = cache.key_table();
  ASSERT_EQ(table.dim(2), 1 + amc_tier_shape(AmcTier::kMid, d).rank);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> mean(d, 0.0), cov(d * d, 0.0);
    for (int64_t r = 0; r < s; ++r) {
      for (int64_t c = 0; c < d; ++c) mean[c] += x[(h * s + r) * d + c] / double(s);
    }
    for (int64_t r = 0; r < s; ++r) {
      for (int64_t a = 0; a < d; ++a) {
        for (int64_t b = 0; b < d; ++b) {
          cov[a * d + b] += (x[(h * s + r) * d + a] - mean[a]) * (x[(h * s + r) * d + b] - mean[b]) / double(s);
        }
      }
    }
    double trace = 0.0;
    for (int64_t a = 0; a < d; ++a) trace += cov[a * d + a];
    for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(row_ptr<float>(table, 0, h, 0)[c], mean[c], 1e-5);
    double previous = INFINITY;
    for (int64_t i = 0; i < table.dim(2) - 1; ++i) {
      const float* u = row_ptr<float>(table, 0, h, 1 + i);
      std::vector<double> cu(d, 0.0);
      for (int64_t a = 0; a < d; ++a) {
        for (int64_t b = 0; b < d; ++b) cu[a] += cov[a * d + b] * u[b];
      }
      double l = 0.0, norm = 0.0, residual = 0.0;
      for (int64_t a = 0; a < d; ++a) {
        l += cu[a] * u[a];
        norm += double(u[a]) * u[a];
      }
      for (int64_t a = 0; a < d; ++a) residual += (cu[a] - l * u[a]) * (cu[a] - l * u[a]);
      EXPECT_NEAR(norm, 1.0, 1e-5);
      EXPECT_LE(std::sqrt(residual), 1e-3 * trace) << "direction " << i << " is an eigenvector";
      EXPECT_LE(l, previous + 1e-6 * trace) << "descending variance";
      previous = l;
    }
  }
}

TEST(AmcCache, BytesAreExactAndReallyAllocated) {
  const int64_t h = 3, d = 64, s = 100;
  const lm::Tensor k = structured_rows(h, s, d, 600).astype(lm::DType::F16);
  const lm::Tensor v = structured_rows(h, s, d, 601).astype(lm::DType::F16);
  const auto before = test_support::allocation_snapshot();
  AmcCache cache(options());
  cache.update_and_fetch(k, v);
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache.nbytes());
  // 8 blocks allocated (256 tokens) of 6 High / 10 Mid / 16 Low rows; per head: High f16 key and
  // value rows; Mid 22 coordinates at 8 bits = 22 bytes + one (scale, min) = 4 bytes, key and
  // value; Low 4 coordinates at 4 bits = 2 bytes + 4; a position per row; the two f32 tables of
  // 1 + 22 rows; the 32-row f16 key and value tails.
  // Counted in 64 bits from the first factor on.
  const std::size_t per_head = int64_t{8} * 6 * (2 * d * 2 + 4) + int64_t{8} * 10 * (2 * (22 + 4) + 4) +
                               int64_t{8} * 16 * (2 * (2 + 4) + 4) + int64_t{2} * 23 * d * 4 + int64_t{2} * 32 * d * 2;
  EXPECT_EQ(cache.nbytes(), h * per_head);
}

TEST(AmcCache, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6, d = 64;
  const test_support::RowMaker rows = [](int64_t h, int64_t n, int64_t dim, uint64_t s) {
    return structured_rows(h, n, dim, s);
  };
  for (const AmcOptions& o : {options(), options(0.1, 0.6, 16)}) {
    AmcCache fused(o), plain(o);
    const std::vector<int64_t> chunks{70, 1, 1, 40, 1};
    const std::vector<float> worst =
        test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 700, rows, rows);
    // f32 summation order only (values reach ~5 here: latent sums vs reconstructed rows).
    for (std::size_t c = 0; c < chunks.size(); ++c) EXPECT_LE(worst[c], 5e-4f) << "chunk " << chunks[c];
  }
}

TEST(AmcCache, StateRoundTripContinuesExactly) {
  integration::register_prompt_cache_types();
  const int64_t heads = 2, d = 32;
  for (int64_t first : {int64_t{10}, int64_t{45}}) {  // before and after the bases are fitted
    AmcCache cache(options());
    const lm::Tensor a = structured_rows(heads, first, d, 800);
    cache.update_and_fetch(a, a);
    auto back = lm::make_cache_of_type(cache.type_name());
    back->from_state(cache.state(), cache.meta_state());
    EXPECT_EQ(back->offset(), cache.offset());
    EXPECT_EQ(back->nbytes(), cache.nbytes());
    const lm::Tensor b = structured_rows(heads, 40, d, 801);
    const lm::KeysValues want = cache.update_and_fetch(b, b);
    const lm::KeysValues got = back->update_and_fetch(b, b);
    EXPECT_EQ(got.keys.to_f32(), want.keys.to_f32());
    EXPECT_EQ(got.values.to_f32(), want.values.to_f32());
    EXPECT_EQ(back->nbytes(), cache.nbytes());
    auto copy = cache.clone();
    EXPECT_EQ(copy->update_and_fetch(b, b).keys.to_f32(), cache.update_and_fetch(b, b).keys.to_f32());
  }
  auto empty = lm::make_cache_of_type("AmcCache");
  EXPECT_THROW(empty->from_state({}, {"0.2"}), base::FormatError);
  EXPECT_FALSE(empty->is_trimmable());
}

TEST(AmcCache, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(AmcOptions&)>& change) {
    return test_support::option_error("amc", change);
  };
  EXPECT_NE(message([](AmcOptions& o) { o.amc_k_high = 1.5; }).find("amc_k_high"), std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_k_mid = -0.1; }).find("amc_k_mid"), std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_k_high = 0.6, o.amc_k_mid = 0.6; }).find("amc_k_high + amc_k_mid"),
            std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_query_alpha = 2; }).find("amc_query_alpha"), std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_threshold_window = 0; }).find("amc_threshold_window"), std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_gamma = -1; }).find("amc_gamma"), std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_calib_variance = 0.0; }).find("amc_calib_variance"), std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_group_size = 0; }).find("amc_group_size"), std::string::npos);
  EXPECT_NE(message([](AmcOptions& o) { o.amc_adaptive_thresholds = true; }).find("amc_calib_variance is required"),
            std::string::npos);
  EXPECT_EQ(message([](AmcOptions& o) { o.amc_calib_variance = 2.0; }), "accepted");
  const auto build = [](const std::function<void(AmcOptions&)>& change) {
    KVCacheConfig c;
    c.method = "amc";
    c.head_dim = 16;
    change(c.options<AmcOptions>());
    KVCacheBuilder(c).build();
  };
  EXPECT_THROW(build([](AmcOptions& o) { o.amc_use_query_saliency = true; }), base::Unsupported);
  EXPECT_THROW(build([](AmcOptions& o) {
                 o.amc_adaptive_thresholds = true;
                 o.amc_calib_variance = 1.0;
               }),
               base::Unsupported);
}

}  // namespace
}  // namespace veloxquant
