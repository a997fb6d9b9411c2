// gear against independent references written from its card (docs/methods/gear.md):
//   * the base quantizer is KIVI's group code per block of G tokens (keys per channel over the
//     block, values per token over channel groups of G) — bit-exact;
//   * the sparse outliers come back exact when no low-rank term is added;
//   * the low-rank terms are the best rank-r approximation of the residual the codes and the
//     outliers leave (Eckart-Young), checked against power iteration with deflation in double —
//     a different algorithm from the cache's Jacobi — up to the f16 rounding of the factors;
//   * with gear_rank unset, a block's rank is the largest over its heads of the fewest singular
//     triplets holding gear_energy_threshold of the residual's energy;
//   * re-coding (gear_recode, the default): a block goes to the finer code exactly when its factors
//     take more bytes and approximate no better (over its heads), and then holds KIVI's group code
//     at that width.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/group_code_reference.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/caches/block_svd.h"
#include "veloxquant/caches/gear_cache.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using test_support::reference_group;

// KIVI's group code on one head's complete blocks [t, d]; the incomplete tail is left as it is.
void reference_dense(std::vector<float>& keys, std::vector<float>& values, int64_t t, int64_t d, int bits,
                     int64_t group) {
  for (int64_t g0 = 0; g0 + group <= t; g0 += group) {
    for (int64_t c = 0; c < d; ++c) {
      std::vector<float> x;
      for (int64_t r = 0; r < group; ++r) x.push_back(keys[(g0 + r) * d + c]);
      const std::vector<float> q = reference_group(x, bits);
      for (int64_t r = 0; r < group; ++r) keys[(g0 + r) * d + c] = q[static_cast<std::size_t>(r)];
    }
    for (int64_t r = g0; r < g0 + group; ++r) {
      for (int64_t c0 = 0; c0 < d; c0 += group) {
        const int64_t n = std::min(group, d - c0);
        const std::vector<float> q =
            reference_group({values.begin() + r * d + c0, values.begin() + r * d + c0 + n}, bits);
        std::copy(q.begin(), q.end(), values.begin() + r * d + c0);
      }
    }
  }
}

// Leading singular triplets of x [rows, cols] by power iteration on x^T x with deflation.
struct Triplets {
  std::vector<double> sigma;
  std::vector<std::vector<double>> u, v;
};

Triplets power_triplets(std::vector<double> x, int64_t rows, int64_t cols, int64_t count) {
  Triplets out;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<double> v(static_cast<std::size_t>(cols));
    for (int64_t c = 0; c < cols; ++c)
      v[static_cast<std::size_t>(c)] = 1.0 + 0.01 * static_cast<double>((c * 7 + i) % 13);
    std::vector<double> u(static_cast<std::size_t>(rows));
    double sigma = 0.0;
    for (int it = 0; it < 4000; ++it) {
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c)
          s += x[static_cast<std::size_t>(r * cols + c)] * v[static_cast<std::size_t>(c)];
        u[static_cast<std::size_t>(r)] = s;
      }
      double norm_u = 0;
      for (double e : u) norm_u += e * e;
      norm_u = std::sqrt(norm_u);
      if (norm_u == 0) break;
      for (double& e : u) e /= norm_u;
      for (int64_t c = 0; c < cols; ++c) {
        double s = 0;
        for (int64_t r = 0; r < rows; ++r)
          s += x[static_cast<std::size_t>(r * cols + c)] * u[static_cast<std::size_t>(r)];
        v[static_cast<std::size_t>(c)] = s;
      }
      sigma = 0;
      for (double e : v) sigma += e * e;
      sigma = std::sqrt(sigma);
      if (sigma == 0) break;
      for (double& e : v) e /= sigma;
    }
    out.sigma.push_back(sigma);
    out.u.push_back(u);
    out.v.push_back(v);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        x[static_cast<std::size_t>(r * cols + c)] -=
            sigma * u[static_cast<std::size_t>(r)] * v[static_cast<std::size_t>(c)];
      }
    }
  }
  return out;
}

std::shared_ptr<lm::KVCache> make(int bits, int group, std::optional<int> rank, double energy, double sparse) {
  KVCacheConfig c;
  c.method = "gear";
  c.head_dim = 16;
  GearOptions& o = c.options<GearOptions>();
  o.gear_bits = bits;
  o.gear_group_size = group;
  o.gear_rank = rank;
  o.gear_energy_threshold = energy;
  o.gear_sparse_fraction = sparse;
  return KVCacheBuilder(c).build().serving();
}

// Rows [g0, g0 + group) x d of head h of a fetched [1, H, T, d] f32 vector, as doubles.
std::vector<double> block_of(const std::vector<float>& x, int64_t h, int64_t t, int64_t d, int64_t g0, int64_t group) {
  std::vector<double> out;
  for (int64_t r = g0; r < g0 + group; ++r) {
    for (int64_t c = 0; c < d; ++c) out.push_back(x[static_cast<std::size_t>((h * t + r) * d + c)]);
  }
  return out;
}

TEST(Gear, BaseQuantizerMatchesKiviGroupCodeBitExactly) {
  const int64_t heads = 2, d = 16;
  for (const auto& [bits, group, t] : {std::tuple{2, 8, 29}, std::tuple{3, 4, 16}, std::tuple{4, 8, 20},
                                       std::tuple{1, 16, 40}, std::tuple{8, 32, 70}}) {
    const lm::Tensor k = test_support::random_kv(1, heads, t, d, 71, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 72, lm::DType::F32);
    auto cache = make(bits, group, 0, 0.9, 0.0);  // no low-rank terms, no outliers: the base code alone
    cache->update_and_fetch(test_support::token_rows(k, 0, 3), test_support::token_rows(v, 0, 3));
    const lm::KeysValues got =
        cache->update_and_fetch(test_support::token_rows(k, 3, t), test_support::token_rows(v, 3, t));
    const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32(), kf = k.to_f32(), vf = v.to_f32();
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> rk(kf.begin() + h * t * d, kf.begin() + (h + 1) * t * d);
      std::vector<float> rv(vf.begin() + h * t * d, vf.begin() + (h + 1) * t * d);
      reference_dense(rk, rv, t, d, bits, group);
      EXPECT_EQ(std::vector<float>(gk.begin() + h * t * d, gk.begin() + (h + 1) * t * d), rk)
          << "bits " << bits << " group " << group << " head " << h;
      EXPECT_EQ(std::vector<float>(gv.begin() + h * t * d, gv.begin() + (h + 1) * t * d), rv)
          << "bits " << bits << " group " << group << " head " << h;
    }
  }
}

TEST(Gear, OutliersComeBackExactAndShrinkTheError) {
  // Spikes far outside the data: without the sparse part they stretch their groups' ranges.
  const int64_t d = 16, t = 32, group = 16;
  std::vector<float> x = test_support::random_kv(1, 1, t, d, 81, lm::DType::F32).to_f32();
  const std::vector<int64_t> spikes = {3 * d + 5, 17 * d + 2, 28 * d + 11};
  for (int64_t e : spikes) x[static_cast<std::size_t>(e)] = 60.0f;
  const lm::Tensor k = lm::Tensor::from_f32(x, {1, 1, t, d}, lm::DType::F32);
  auto sparse = make(2, static_cast<int>(group), 0, 0.9, 0.01);  // round(0.01 * 256) = 3 outliers per block
  auto plain = make(2, static_cast<int>(group), 0, 0.9, 0.0);
  const std::vector<float> a = sparse->update_and_fetch(k, k).keys.to_f32();
  const std::vector<float> b = plain->update_and_fetch(k, k).keys.to_f32();
  for (int64_t e : spikes) EXPECT_FLOAT_EQ(a[static_cast<std::size_t>(e)], 60.0f) << "element " << e;
  // The other rows of each spike's key channel group (its channel over its block): their range
  // is the data's, not stretched to the spike.
  double ea = 0, eb = 0;
  for (int64_t e : spikes) {
    const int64_t row = e / d, c = e % d, g0 = row / group * group;
    for (int64_t r = g0; r < g0 + group; ++r) {
      if (r == row) continue;
      const std::size_t i = static_cast<std::size_t>(r * d + c);
      ea += std::fabs(a[i] - x[i]);
      eb += std::fabs(b[i] - x[i]);
    }
  }
  EXPECT_LT(ea * 5, eb);
}

// One group x d block: the squared distance between the cache's correction (got - dense) and the
// reference rank-r approximation of the residual (exact - dense), and that approximation's squared
// norm.
std::pair<double, double> correction_error(const std::vector<double>& exact, const std::vector<double>& dense,
                                           const std::vector<double>& got, int64_t group, int64_t d, int64_t rank) {
  std::vector<double> residual(exact.size());
  for (std::size_t i = 0; i < exact.size(); ++i) residual[i] = exact[i] - dense[i];
  const Triplets ref = power_triplets(residual, group, d, rank);
  double diff = 0, norm = 0;
  for (int64_t r = 0; r < group; ++r) {
    for (int64_t col = 0; col < d; ++col) {
      double want = 0;
      for (int64_t i = 0; i < rank; ++i) {
        want += ref.sigma[static_cast<std::size_t>(i)] *
                ref.u[static_cast<std::size_t>(i)][static_cast<std::size_t>(r)] *
                ref.v[static_cast<std::size_t>(i)][static_cast<std::size_t>(col)];
      }
      const std::size_t at = static_cast<std::size_t>(r * d + col);
      diff += (got[at] - dense[at] - want) * (got[at] - dense[at] - want);
      norm += want * want;
    }
  }
  return {diff, norm};
}

TEST(Gear, LowRankTermsAreTheBestApproximationOfTheResidual) {
  const int64_t heads = 2, d = 16;
  for (const auto& [group, rank, sparse] : {std::tuple{8, 3, 0.0}, std::tuple{16, 5, 0.02}, std::tuple{32, 2, 0.01}}) {
    const int64_t t = 2 * group + 5;
    const lm::Tensor k = test_support::random_kv(1, heads, t, d, 91, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 92, lm::DType::F32);
    auto base = make(2, group, 0, 0.9, sparse);
    auto corrected = make(2, group, rank, 0.9, sparse);
    const lm::KeysValues b = base->update_and_fetch(k, v);
    const lm::KeysValues c = corrected->update_and_fetch(k, v);
    for (int which = 0; which < 2; ++which) {
      const std::vector<float> x = (which == 0 ? k : v).to_f32();
      const std::vector<float> xb = (which == 0 ? b.keys : b.values).to_f32();
      const std::vector<float> xc = (which == 0 ? c.keys : c.values).to_f32();
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t g0 = 0; g0 + group <= t; g0 += group) {
          const auto [diff, norm] = correction_error(block_of(x, h, t, d, g0, group), block_of(xb, h, t, d, g0, group),
                                                     block_of(xc, h, t, d, g0, group), group, d, rank);
          // f16 factors: ~2^-11 relative per factor.
          EXPECT_LT(std::sqrt(diff), 3e-3 * std::sqrt(norm))
              << "group " << group << " rank " << rank << " which " << which << " head " << h << " block " << g0;
        }
      }
    }
  }
}

// The rank the energy rule keeps for one head's group x d block: the fewest leading singular
// values of the residual (exact - dense) whose squares reach `energy` of its squared norm.
int64_t reference_energy_rank(const std::vector<double>& exact, const std::vector<double>& dense, int64_t group,
                              int64_t d, double energy) {
  std::vector<double> residual(exact.size());
  double total = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    residual[i] = exact[i] - dense[i];
    total += residual[i] * residual[i];
  }
  const Triplets ref = power_triplets(residual, group, d, group);
  double kept = 0;
  int64_t r = 0;
  while (r < group && kept < energy * total) {
    kept += ref.sigma[static_cast<std::size_t>(r)] * ref.sigma[static_cast<std::size_t>(r)];
    ++r;
  }
  return r;
}

TEST(Gear, EnergyRuleRankIsTheLargestAnyHeadNeeds) {
  const int64_t heads = 3, d = 16, group = 8, t = 24;
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 101, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 102, lm::DType::F32);
  for (double energy : {0.3, 0.6, 0.9}) {
    auto base = make(2, static_cast<int>(group), 0, energy, 0.0);
    // The original's arithmetic: every block keeps its factors (no re-coding).
    GearCache cache(2, static_cast<int>(group), std::nullopt, energy, 0.0, false);
    const lm::KeysValues b = base->update_and_fetch(k, v);
    cache.update_and_fetch(k, v);
    for (int which = 0; which < 2; ++which) {
      const std::vector<float> x = (which == 0 ? k : v).to_f32();
      const std::vector<float> xb = (which == 0 ? b.keys : b.values).to_f32();
      for (int64_t g0 = 0; g0 + group <= t; g0 += group) {
        int64_t want = 0;
        for (int64_t h = 0; h < heads; ++h) {
          want = std::max(want, reference_energy_rank(block_of(x, h, t, d, g0, group), block_of(xb, h, t, d, g0, group),
                                                      group, d, energy));
        }
        EXPECT_EQ(cache.block_rank(g0 / group, which), want)
            << "energy " << energy << " which " << which << " block " << g0;
      }
    }
  }
}

// sum_i sigma_i left_i right_i^T gives the rows x cols block back.
void check_reconstructs(const BlockSvd& s, const std::vector<float>& x, int64_t rows, int64_t cols) {
  const int64_t n = std::min(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double y = 0;
      for (int64_t i = 0; i < n; ++i) {
        y += s.sigma[static_cast<std::size_t>(i)] * s.left[static_cast<std::size_t>(i * rows + r)] *
             s.right[static_cast<std::size_t>(i * cols + c)];
      }
      EXPECT_NEAR(y, x[static_cast<std::size_t>(r * cols + c)], 1e-9);
    }
  }
}

// The left and the right singular vectors are orthonormal sets.
void check_orthonormal(const BlockSvd& s, int64_t rows, int64_t cols) {
  const int64_t n = std::min(rows, cols);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double uu = 0, vv = 0;
      for (int64_t r = 0; r < rows; ++r)
        uu += s.left[static_cast<std::size_t>(i * rows + r)] * s.left[static_cast<std::size_t>(j * rows + r)];
      for (int64_t c = 0; c < cols; ++c)
        vv += s.right[static_cast<std::size_t>(i * cols + c)] * s.right[static_cast<std::size_t>(j * cols + c)];
      EXPECT_NEAR(uu, i == j ? 1.0 : 0.0, 1e-9);
      EXPECT_NEAR(vv, i == j ? 1.0 : 0.0, 1e-9);
    }
  }
}

TEST(Gear, BlockSvdReconstructsAndIsOrthonormal) {
  for (const GramSolver solver : {GramSolver::kJacobi, GramSolver::kTridiagonal}) {
    for (const auto& [rows, cols] : {std::pair{8, 16}, std::pair{16, 8}, std::pair{5, 5}, std::pair{32, 64}}) {
      const std::vector<float> x = test_support::random_kv(1, 1, rows, cols, 111, lm::DType::F32).to_f32();
      const BlockSvd s = block_svd(x.data(), rows, cols, solver);
      // Both solvers give the same singular values (the tridiagonal one against Jacobi's).
      const BlockSvd jacobi = block_svd(x.data(), rows, cols);
      for (std::size_t i = 0; i < s.sigma.size(); ++i)
        EXPECT_NEAR(s.sigma[i], jacobi.sigma[i], 1e-9 * (1.0 + jacobi.sigma[0]));
      const int64_t n = std::min(rows, cols);
      ASSERT_EQ(static_cast<int64_t>(s.sigma.size()), n);
      for (int64_t i = 1; i < n; ++i)
        EXPECT_GE(s.sigma[static_cast<std::size_t>(i - 1)], s.sigma[static_cast<std::size_t>(i)]);
      check_reconstructs(s, x, rows, cols);
      check_orthonormal(s, rows, cols);
      EXPECT_EQ(energy_rank(s.sigma, 1.0), n);
      EXPECT_EQ(energy_rank(s.sigma, 0.0), 0);
    }
  }
}

TEST(Gear, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "gear";
  c.head_dim = d;
  c.options<GearOptions>().gear_rank = 4;  // 2 bits, 1% outliers, G 32
  auto cache = KVCacheBuilder(c).build().serving();
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(b, h, 100, d, i), test_support::random_kv(b, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 tokens: 9 blocks in a 512-token region (16 blocks), 12 rows in the 32-row tail; 36 of 64
  // factor rows used per K and V.
  const std::size_t heads = b * h, blocks = 16, rows = 512, terms = 64;
  const std::size_t codes = 2 * heads * rows * 4 * 4;              // 2-bit: 4 words a row
  const std::size_t key_params = heads * blocks * 2 * d * 2;       // per block, per channel
  const std::size_t value_params = heads * rows * 2 * 2 * 2;       // 2 groups of 32 channels
  const std::size_t outliers = 2 * heads * blocks * 20 * (4 + 4);  // round(0.01 * 32 * 64) = 20
  const std::size_t block_terms = blocks * 4 * 4;
  const std::size_t factors = 2 * heads * terms * (32 + d) * 2;
  const std::size_t tail = 2 * heads * 32 * d * 2;
  EXPECT_EQ(cache->nbytes(), codes + key_params + value_params + outliers + block_terms + factors + tail);
}

TEST(Gear, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6, d = 64;
  for (const auto& [bits, rank, sparse] :
       {std::tuple{2, std::optional<int>{}, 0.01}, std::tuple{2, std::optional<int>{4}, 0.0},
        std::tuple{3, std::optional<int>{2}, 0.02}, std::tuple{4, std::optional<int>{0}, 0.01}}) {
    GearCache fused(bits, 32, rank, 0.9, sparse), plain(bits, 32, rank, 0.9, sparse);
    // 150 and 70 queries read the blocks decoded to f32 (>= 64 queries: prefill chunks), 17 and 1
    // the fused codes, outliers and low-rank terms.
    const std::vector<int64_t> chunks{150, 70, 17, 1, 1};
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 500);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      // Integer key scores (query rounded to 16 bits) on the 2- and 4-bit codes: ~1e-4 relative.
      EXPECT_LE(worst[c], 2e-3f) << "bits " << bits << " chunk " << chunks[c];
      // The decoded f32 blocks are the fetched rows to f32 rounding (measured <= 7e-6; the fused
      // 2-bit path, with its 16-bit query, ~8e-4).
      if (chunks[c] >= 64) {
        EXPECT_LE(worst[c], 5e-5f) << "bits " << bits << " chunk " << chunks[c];
      }
    }
  }
}

// The byte test of re-coding: factors 2 (r_k + r_v)(G + D) bytes per head against the finer
// code's extra G * D * 2 * (fine - base) / 8 bytes (keys and values; params take the same bytes at
// any width), on both sides of the switch point.
TEST(Gear, RecodeSwitchPointIsTheFactorBytes) {
  const auto extra = [](int64_t g, int64_t d, int bits, int fine) { return g * d * 2 * (fine - bits) / 8; };
  const auto factors = [](int64_t rk, int64_t rv, int64_t g, int64_t d) { return 2 * (rk + rv) * (g + d); };
  // G 32, D 64: 2 -> 4 bits adds 1,024 bytes; 192 per term: 5 terms stay, 6 re-code.
  EXPECT_EQ(extra(32, 64, 2, 4), 1024);
  for (int64_t rk = 0; rk <= 32; ++rk) {
    for (int64_t rv = 0; rv <= 32; ++rv) {
      EXPECT_EQ(gear_factors_cost_more(rk, rv, 32, 64, 64, 2, 4), factors(rk, rv, 32, 64) > extra(32, 64, 2, 4))
          << rk << " " << rv;
      EXPECT_EQ(gear_factors_cost_more(rk, rv, 32, 64, 64, 4, 8), factors(rk, rv, 32, 64) > extra(32, 64, 4, 8))
          << rk << " " << rv;
    }
  }
  EXPECT_FALSE(gear_factors_cost_more(5, 0, 32, 64, 64, 2, 4));
  EXPECT_FALSE(gear_factors_cost_more(2, 3, 32, 64, 64, 2, 4));
  EXPECT_TRUE(gear_factors_cost_more(6, 0, 32, 64, 64, 2, 4));
  EXPECT_TRUE(gear_factors_cost_more(3, 3, 32, 64, 64, 2, 4));
  EXPECT_FALSE(gear_factors_cost_more(10, 0, 32, 64, 64, 4, 8));  // 1,920 <= 2,048
  EXPECT_TRUE(gear_factors_cost_more(5, 6, 32, 64, 64, 4, 8));    // 2,112 > 2,048
  // The widths the cache takes: 2 * bits up to 8; none with a fixed rank or gear_recode=false.
  EXPECT_EQ(GearCache(2, 32, std::nullopt, 0.9, 0.01).recode_bits(), 4);
  EXPECT_EQ(GearCache(3, 32, std::nullopt, 0.9, 0.01).recode_bits(), 6);
  EXPECT_EQ(GearCache(5, 32, std::nullopt, 0.9, 0.01).recode_bits(), 8);
  EXPECT_EQ(GearCache(8, 32, std::nullopt, 0.9, 0.01).recode_bits(), 8);
  EXPECT_EQ(GearCache(2, 32, 4, 0.9, 0.01).recode_bits(), 2);
  EXPECT_EQ(GearCache(2, 32, std::nullopt, 0.9, 0.01, false).recode_bits(), 2);
}

// A 2-bit code's residual on random rows is flat: the energy rule wants most of the 32 terms, so
// every block is re-coded, and then holds KIVI's 4-bit group code exactly (no outliers here).
// Its bytes are the finer set's layout.
TEST(Gear, RecodedBlocksAreTheFinerGroupCodeAndItsBytes) {
  const int64_t heads = 2, d = 64, group = 32, t = 100;
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 201, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 202, lm::DType::F32);
  const auto before = test_support::allocation_snapshot();
  auto cache = std::make_shared<GearCache>(2, 32, std::nullopt, 0.9, 0.0);
  const lm::KeysValues got = cache->update_and_fetch(k, v);
  const auto after = test_support::allocation_snapshot();
  for (int64_t g = 0; g < t / group; ++g) {
    EXPECT_TRUE(cache->block_recoded(g)) << "block " << g;
    EXPECT_EQ(cache->block_rank(g, 0), 0);
  }
  std::vector<float> wk = k.to_f32(), wv = v.to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<float> hk(wk.begin() + h * t * d, wk.begin() + (h + 1) * t * d);
    std::vector<float> hv(wv.begin() + h * t * d, wv.begin() + (h + 1) * t * d);
    reference_dense(hk, hv, t, d, 4, group);
    std::copy(hk.begin(), hk.end(), wk.begin() + h * t * d);
    std::copy(hv.begin(), hv.end(), wv.begin() + h * t * d);
  }
  EXPECT_EQ(got.keys.to_f32(), wk);
  EXPECT_EQ(got.values.to_f32(), wv);
  // 100 tokens: 3 re-coded blocks in a 256-token region (8 blocks), 4 rows in the tail; no base
  // blocks, so no base storage; the format table one i32 per block of the region.
  // (The fetched rows are alive too: f32 [1, 2, 100, 64] keys and values, 51,200 bytes each.)
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes),
            cache->nbytes() + got.keys.storage_bytes() + got.values.storage_bytes());
  const std::size_t blocks = 8, rows = 256;
  const std::size_t codes = 2 * heads * rows * 8 * 4;         // 4-bit: 8 words a row
  const std::size_t key_params = heads * blocks * 2 * d * 2;  // per block, per channel
  const std::size_t value_params = heads * rows * 2 * 2 * 2;  // 2 groups of 32 channels
  const std::size_t formats = blocks * 4;
  const std::size_t tail = 2 * heads * 32 * d * 4;  // f32 input
  EXPECT_EQ(cache->nbytes(), codes + key_params + value_params + formats + tail);
}

// Squared error of rows [g0, g0 + group) of head h, fetched against exact.
double block_error(const std::vector<float>& exact, const std::vector<float>& got, int64_t h, int64_t t, int64_t d,
                   int64_t g0, int64_t group) {
  const std::vector<double> a = block_of(exact, h, t, d, g0, group), b = block_of(got, h, t, d, g0, group);
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e += (a[i] - b[i]) * (a[i] - b[i]);
  return e;
}

// Re-coded blocks approximate no worse than the original's factors would have (the rule's second
// test), over the block's heads, keys and values apart; blocks whose factors are cheap keep them.
TEST(Gear, RecodedBlocksApproximateNoWorseThanTheFactors) {
  const int64_t heads = 3, d = 64, group = 32, t = 6 * group;
  for (double energy : {0.05, 0.9}) {
    const lm::Tensor k = test_support::random_kv(1, heads, t, d, 301, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 302, lm::DType::F32);
    GearCache recode(2, 32, std::nullopt, energy, 0.01), original(2, 32, std::nullopt, energy, 0.01, false);
    const lm::KeysValues a = recode.update_and_fetch(k, v), b = original.update_and_fetch(k, v);
    int recoded = 0;
    for (int64_t g = 0; g < t / group; ++g) {
      const bool cheap =
          !gear_factors_cost_more(original.block_rank(g, 0), original.block_rank(g, 1), group, d, d, 2, 4);
      if (cheap) {
        EXPECT_FALSE(recode.block_recoded(g)) << "energy " << energy << " block " << g;
        EXPECT_EQ(recode.block_rank(g, 0), original.block_rank(g, 0));
        EXPECT_EQ(recode.block_rank(g, 1), original.block_rank(g, 1));
      }
      if (!recode.block_recoded(g)) continue;
      ++recoded;
      for (int which = 0; which < 2; ++which) {
        const std::vector<float> x = (which == 0 ? k : v).to_f32();
        const std::vector<float> xa = (which == 0 ? a.keys : a.values).to_f32();
        const std::vector<float> xb = (which == 0 ? b.keys : b.values).to_f32();
        double ea = 0, eb = 0;
        for (int64_t h = 0; h < heads; ++h) {
          ea += block_error(x, xa, h, t, d, g * group, group);
          eb += block_error(x, xb, h, t, d, g * group, group);
        }
        // Over the block's heads; the original's factors are f16: their error may sit a rounding
        // above the exact SVD's the rule compares with.
        EXPECT_LE(ea, eb * 1.001 + 1e-6) << "energy " << energy << " block " << g << " which " << which;
      }
    }
    // At 0.9 every block of random rows re-codes; at 0.05 the rule keeps 1 term a side: factors.
    if (energy > 0.5) {
      EXPECT_EQ(recoded, t / group);
    }
    if (energy < 0.5) {
      EXPECT_EQ(recoded, 0);
    }
  }
}

// Blocks of both formats interleave (every third block's rows all equal: its 2-bit residual is
// rank 1 in the values, 0 in the keys, so it keeps factors; the rest re-code): fused attention
// over both sets, with their true positions, equals attention over the fetched rows.
TEST(Gear, MixedBlockFormatsAttendInPositionOrder) {
  const int64_t heads = 2, hq = 6, d = 64, group = 32;
  const auto patterned = [](uint64_t salt) {
    auto position = std::make_shared<int64_t>(0);
    return [position, salt](int64_t h, int64_t n, int64_t dim, uint64_t seed) {
      lm::Tensor rows = test_support::random_kv(1, h, n, dim, seed, lm::DType::F32);
      const lm::Tensor fixed = test_support::random_kv(1, h, 1, dim, salt, lm::DType::F32);
      float* x = rows.data<float>();
      const float* f = fixed.data<float>();
      for (int64_t j = 0; j < n; ++j) {
        if (((*position + j) / 32) % 3 != 1) continue;
        for (int64_t hh = 0; hh < h; ++hh) std::copy(f + hh * dim, f + (hh + 1) * dim, x + (hh * n + j) * dim);
      }
      *position += n;
      return rows;
    };
  };
  GearCache fused(2, 32, std::nullopt, 0.9, 0.01), plain(2, 32, std::nullopt, 0.9, 0.01);
  const std::vector<int64_t> chunks{150, 70, 17, 1, 1, 40, 1};
  const std::vector<float> worst =
      test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 600, patterned(7), patterned(8));
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    EXPECT_LE(worst[c], 2e-3f) << "chunk " << chunks[c];
    if (chunks[c] >= 64) {
      EXPECT_LE(worst[c], 5e-5f) << "chunk " << chunks[c];
    }
  }
  int base_blocks = 0, recoded = 0;
  for (int64_t g = 0; g < fused.frontier() / group; ++g) {
    if (fused.block_recoded(g)) {
      ++recoded;
    } else {
      ++base_blocks;
      EXPECT_EQ(g % 3, 1) << "block " << g;
      EXPECT_EQ(fused.block_rank(g, 1), 1) << "block " << g;
    }
  }
  EXPECT_GT(base_blocks, 0);
  EXPECT_GT(recoded, base_blocks);
  // Both sets' bytes (the base set grown block by block) are what a copy allocates.
  const auto before = test_support::allocation_snapshot();
  const auto copy = fused.clone();
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), copy->nbytes());
  // A state round trip keeps both sets and the formats.
  GearCache restored(2, 32, std::nullopt, 0.9, 0.01);
  restored.from_state(fused.state(), fused.meta_state());
  const lm::Tensor k = test_support::random_kv(1, heads, 1, d, 900, lm::DType::F32);
  const lm::KeysValues x = fused.update_and_fetch(k, k), y = restored.update_and_fetch(k, k);
  EXPECT_EQ(x.keys.to_f32(), y.keys.to_f32());
  EXPECT_EQ(x.values.to_f32(), y.values.to_f32());
}

TEST(Gear, BadOptionsNameTheField) {
  const auto message = [](const std::function<void(GearOptions&)>& change) {
    return test_support::option_error("gear", change);
  };
  EXPECT_NE(message([](GearOptions& o) { o.gear_bits = 9; }).find("gear_bits"), std::string::npos);
  EXPECT_NE(message([](GearOptions& o) { o.gear_rank = -1; }).find("gear_rank"), std::string::npos);
  EXPECT_NE(message([](GearOptions& o) { o.gear_energy_threshold = 1.5; }).find("gear_energy_threshold"),
            std::string::npos);
  EXPECT_NE(message([](GearOptions& o) { o.gear_sparse_fraction = 0.7; }).find("gear_sparse_fraction"),
            std::string::npos);
  EXPECT_NE(message([](GearOptions& o) { o.gear_group_size = 0; }).find("gear_group_size"), std::string::npos);
  EXPECT_EQ(message([](GearOptions& o) { o.gear_rank = 8; }), "accepted");
  KVCacheConfig c;
  c.method = "gear";
  c.head_dim = 16;
  c.options<GearOptions>().gear_quantize_values = false;
  try {
    KVCacheBuilder(c).build();
    FAIL() << "gear_quantize_values=false accepted";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("gear_quantize_values"), std::string::npos);
  }
}

}  // namespace
}  // namespace veloxquant
