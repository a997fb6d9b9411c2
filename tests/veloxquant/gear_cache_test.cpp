// gear against independent references written from its card (docs/methods/gear.md):
//   * the base quantizer is KIVI's group code per block of G tokens (keys per channel over the
//     block, values per token over channel groups of G) — bit-exact;
//   * the sparse outliers come back exact when no low-rank term is added;
//   * the low-rank terms are the best rank-r approximation of the residual the codes and the
//     outliers leave (Eckart-Young), checked against power iteration with deflation in double —
//     a different algorithm from the cache's Jacobi — up to the f16 rounding of the factors;
//   * with gear_rank unset, a block's rank is the largest over its heads of the fewest singular
//     triplets holding gear_energy_threshold of the residual's energy.
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
          const std::vector<double> exact = block_of(x, h, t, d, g0, group);
          const std::vector<double> dense = block_of(xb, h, t, d, g0, group);
          const std::vector<double> got = block_of(xc, h, t, d, g0, group);
          std::vector<double> residual(exact.size());
          for (std::size_t i = 0; i < exact.size(); ++i) residual[i] = exact[i] - dense[i];
          const Triplets ref = power_triplets(residual, group, d, rank);
          // The reference rank-r approximation against the cache's correction (got - dense).
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
          // f16 factors: ~2^-11 relative per factor.
          EXPECT_LT(std::sqrt(diff), 3e-3 * std::sqrt(norm))
              << "group " << group << " rank " << rank << " which " << which << " head " << h << " block " << g0;
        }
      }
    }
  }
}

TEST(Gear, EnergyRuleRankIsTheLargestAnyHeadNeeds) {
  const int64_t heads = 3, d = 16, group = 8, t = 24;
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 101, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 102, lm::DType::F32);
  for (double energy : {0.3, 0.6, 0.9}) {
    auto base = make(2, static_cast<int>(group), 0, energy, 0.0);
    GearCache cache(2, static_cast<int>(group), std::nullopt, energy, 0.0);
    const lm::KeysValues b = base->update_and_fetch(k, v);
    cache.update_and_fetch(k, v);
    for (int which = 0; which < 2; ++which) {
      const std::vector<float> x = (which == 0 ? k : v).to_f32();
      const std::vector<float> xb = (which == 0 ? b.keys : b.values).to_f32();
      for (int64_t g0 = 0; g0 + group <= t; g0 += group) {
        int64_t want = 0;
        for (int64_t h = 0; h < heads; ++h) {
          const std::vector<double> exact = block_of(x, h, t, d, g0, group);
          const std::vector<double> dense = block_of(xb, h, t, d, g0, group);
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
          want = std::max(want, r);
        }
        EXPECT_EQ(cache.block_rank(g0 / group, which), want)
            << "energy " << energy << " which " << which << " block " << g0;
      }
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
      if (chunks[c] >= 64) EXPECT_LE(worst[c], 5e-5f) << "bits " << bits << " chunk " << chunks[c];
    }
  }
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
