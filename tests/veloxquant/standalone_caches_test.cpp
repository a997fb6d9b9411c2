// The standalone caches (spec §2.4): the append/attend interface, built by
// KVCacheBuilder::build() for every standalone method of the registry; ring-buffer capacity and
// sliding window; reset; memory_bytes against an allocation counter; spectral's PCA calibration.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "veloxquant/quant/qjl.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

std::vector<std::vector<float>> gaussian_rows(int n, int d, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<std::vector<float>> rows(static_cast<std::size_t>(n), std::vector<float>(static_cast<std::size_t>(d)));
  for (auto& r : rows)
    for (float& x : r) x = dist(rng);
  return rows;
}

// softmax(q.k / sqrt(d)) v in double: what attend() estimates.
std::vector<float> exact_attention(const std::vector<std::vector<float>>& k, const std::vector<std::vector<float>>& v,
                                   const std::vector<float>& q) {
  const std::size_t d = q.size();
  std::vector<double> w;
  double mx = -1e300;
  for (const auto& key : k) {
    double s = 0;
    for (std::size_t i = 0; i < d; ++i) s += double(q[i]) * key[i];
    w.push_back(s / std::sqrt(double(d)));
    mx = std::max(mx, w.back());
  }
  double total = 0;
  for (double& x : w) total += (x = std::exp(x - mx));
  std::vector<float> out(d, 0.0f);
  for (std::size_t t = 0; t < k.size(); ++t)
    for (std::size_t i = 0; i < d; ++i) out[i] += static_cast<float>(w[t] / total * v[t][i]);
  return out;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    e += std::pow(got[i] - want[i], 2);
    n += std::pow(want[i], 2);
  }
  return std::sqrt(e / n);
}

std::shared_ptr<StandaloneCache> build(const std::string& method, int d, int bits,
                                       std::optional<int64_t> capacity = std::nullopt) {
  return KVCacheBuilder()
      .with_method(method)
      .with_head_dim(d)
      .with_bit_width(bits)
      .with_capacity(capacity)
      .build()
      .standalone();
}

TEST(StandaloneCaches, EveryStandaloneMethodAttendsCloseToExactAttention) {
  const int d = 64, n = 200;
  const auto keys = gaussian_rows(n, d, 1), values = gaussian_rows(n, d, 2);
  const auto queries = gaussian_rows(8, d, 3, 0.5f);
  for (std::string_view name : STANDALONE_METHODS) {
    SCOPED_TRACE(std::string(name));
    // QJL keeps only 1-bit signs: with m = d its score noise (variance (pi/2)|q|^2|k|^2/m, QJL
    // Lemma 3.2) reorders this peaked softmax, so here it gets m = 8d (past build()'s
    // jl_dim <= head_dim rule, hence built directly).
    std::shared_ptr<StandaloneCache> cache;
    if (name == "qjl") {
      KVCacheConfig c;
      c.method = "qjl";
      c.head_dim = d;
      cache = std::make_shared<QuantizerStandaloneCache>(c, std::make_unique<quant::Qjl>(d, 1, 42, 8 * d));
    } else {
      cache = build(std::string(name), d, 4);
    }
    EXPECT_EQ(cache->method(), name);
    EXPECT_EQ(cache->head_dim(), d);
    const std::vector<float> empty = cache->attend(queries[0]);
    EXPECT_EQ(empty, std::vector<float>(d, 0.0f));  // zeros before any token (spec §2.4)
    for (int t = 0; t < n; ++t) cache->append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
    EXPECT_EQ(cache->size(), static_cast<std::size_t>(n));
    double worst = 0;
    for (const auto& q : queries)
      worst = std::max(worst, relative_error(cache->attend(q), exact_attention(keys, values, q)));
    // 4-bit keys (QJL: 1-bit sketch of d rows) and int8 values: attention outputs within 35%
    // relative L2 of exact — loose on purpose, the quantizer tests pin the estimator statistics.
    std::printf("%s: worst relative attention error %.3f\n", std::string(name).c_str(), worst);
    EXPECT_LT(worst, 0.35);
  }
}

TEST(StandaloneCaches, KeyAndValueAppendsPairUp) {
  auto cache = build("turboquant_mse", 16, 3);
  const auto rows = gaussian_rows(3, 16, 4);
  cache->append_key(rows[0]);
  EXPECT_EQ(cache->size(), 0u);  // a token is complete once it has its value
  cache->append_value(rows[1]);
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_THROW(cache->append_key(std::vector<float>(15, 0.0f)), base::InvalidArgument);
  EXPECT_THROW(cache->attend(std::vector<float>(17, 0.0f)), base::InvalidArgument);
}

TEST(StandaloneCaches, RingBufferKeepsTheNewestCapacityTokens) {
  const int d = 32;
  const auto keys = gaussian_rows(20, d, 5), values = gaussian_rows(20, d, 6);
  const auto q = gaussian_rows(1, d, 7)[0];
  for (std::string method : {"turboquant_prod", "turboquant_mse", "qjl", "polar"}) {
    SCOPED_TRACE(method);
    auto ring = build(method, d, 3, 8);
    auto fresh = build(method, d, 3, 8);
    for (int t = 0; t < 20; ++t) ring->append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
    for (int t = 12; t < 20; ++t) fresh->append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
    EXPECT_EQ(ring->size(), 8u);
    const std::vector<float> a = ring->attend(q), b = fresh->attend(q);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(a[static_cast<std::size_t>(i)], b[static_cast<std::size_t>(i)], 1e-5f);
  }
  // sliding_window bounds the ring the same way.
  auto window = KVCacheBuilder().with_method("qjl").with_head_dim(d).with_sliding_window(4).build().standalone();
  for (int t = 0; t < 10; ++t) window->append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
  EXPECT_EQ(window->size(), 4u);
}

TEST(StandaloneCaches, MemoryBytesAreAllocatedBytes) {
  const int d = 64;
  const auto rows = gaussian_rows(300, d, 8);
  for (std::string method : {"turboquant_prod", "turboquant_mse", "qjl", "polar"}) {
    SCOPED_TRACE(method);
    const auto before = test_support::allocation_snapshot();
    auto cache = build(method, d, 4);
    for (const auto& r : rows) cache->append(r, r);
    const auto after = test_support::allocation_snapshot();
    EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->memory_bytes());
    // 300 tokens -> two 256-token growth steps; a slot = the quantizer's code + d int8 + f16 scale.
    const auto& q = dynamic_cast<const QuantizerStandaloneCache&>(*cache).quantizer();
    EXPECT_EQ(cache->memory_bytes(), 512 * (q.code_bytes() + d + 2));
    cache->reset();
    EXPECT_EQ(cache->size(), 0u);
    EXPECT_EQ(cache->memory_bytes(), 0u);
  }
}

TEST(StandaloneCaches, QjlSketchSizeFollowsJlDim) {
  auto plain = KVCacheBuilder().with_method("qjl").with_head_dim(64).build().standalone();
  auto sketched = KVCacheBuilder().with_method("qjl").with_head_dim(64).with_jl_dim(32).build().standalone();
  const auto rows = gaussian_rows(1, 64, 9);
  plain->append(rows[0], rows[0]);
  sketched->append(rows[0], rows[0]);
  // m = d by default (spec §2.4): 8 bytes of signs + a 2-byte norm; jl_dim 32: 4 + 2.
  EXPECT_EQ(dynamic_cast<const QuantizerStandaloneCache&>(*plain).quantizer().code_bytes(), 10u);
  EXPECT_EQ(dynamic_cast<const QuantizerStandaloneCache&>(*sketched).quantizer().code_bytes(), 6u);
  EXPECT_THROW(KVCacheBuilder().with_method("qjl").with_head_dim(64).with_jl_dim(65).build(), QuantizerConfigError);
}

TEST(StandaloneCaches, BitRangesPerMethod) {
  EXPECT_NO_THROW(build("turboquant_prod", 32, 1));  // b_mse = max(b - 1, 1) (spec §2.4)
  try {
    build("polar", 32, 7);
    FAIL() << "polar accepted 7 bits";
  } catch (const QuantizerConfigError& e) {
    EXPECT_STREQ(e.what(), "bit_width_inlier for 'polar' must lie in [1, 6], got 7");
  }
  EXPECT_THROW(build("turboquant_mse", 32, 9), QuantizerConfigError);
}

TEST(SymmetricEigen, KnownMatrix) {
  std::vector<double> values, vectors;
  symmetric_eigen({2, 1, 0, 1, 2, 0, 0, 0, 5}, 3, values, vectors);
  EXPECT_NEAR(values[0], 5, 1e-12);
  EXPECT_NEAR(values[1], 3, 1e-12);
  EXPECT_NEAR(values[2], 1, 1e-12);
  EXPECT_NEAR(std::fabs(vectors[3]), std::sqrt(0.5), 1e-12);  // (1, 1, 0) / sqrt 2
  EXPECT_NEAR(std::fabs(vectors[4]), std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(vectors[3] * vectors[4], 0.5, 1e-12);
}

TEST(SpectralCache, CalibratesAPcaBasisFromTheFirstKeys) {
  const int d = 32;
  KVCacheConfig c;
  c.method = "spectral";
  c.head_dim = d;
  c.bit_width_inlier = 2;
  c.spectral.spectral_calib_tokens = 64;
  SpectralCache cache(c);
  // Keys with a planted dominant direction u (x10) on top of unit noise.
  std::vector<float> u(d, 0.0f);
  for (int i = 0; i < d; ++i) u[static_cast<std::size_t>(i)] = (i % 3 == 0 ? 1.0f : -0.5f);
  double un = 0;
  for (float x : u) un += x * x;
  for (float& x : u) x = static_cast<float>(x / std::sqrt(un));
  auto keys = gaussian_rows(100, d, 10);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> amp(0.0f, 10.0f);
  for (auto& k : keys) {
    const float a = amp(rng);
    for (int i = 0; i < d; ++i) k[static_cast<std::size_t>(i)] += a * u[static_cast<std::size_t>(i)];
  }
  const auto values = gaussian_rows(100, d, 12);
  for (int t = 0; t < 63; ++t) cache.append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
  EXPECT_FALSE(cache.calibrated());
  const auto q = gaussian_rows(1, d, 13, 0.3f)[0];
  std::vector<std::vector<float>> k63(keys.begin(), keys.begin() + 63), v63(values.begin(), values.begin() + 63);
  // Before calibration the held keys are scored exactly (only values are int8).
  EXPECT_LT(relative_error(cache.attend(q), exact_attention(k63, v63, q)), 0.02);
  for (int t = 63; t < 100; ++t) cache.append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
  ASSERT_TRUE(cache.calibrated());
  const std::vector<float>& basis = cache.basis();
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      double dot = 0;
      for (int c2 = 0; c2 < d; ++c2)
        dot += double(basis[static_cast<std::size_t>(i) * d + c2]) * basis[static_cast<std::size_t>(j) * d + c2];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5);
    }
  double align = 0;
  for (int i = 0; i < d; ++i) align += double(basis[static_cast<std::size_t>(i)]) * u[static_cast<std::size_t>(i)];
  EXPECT_GT(std::fabs(align), 0.99);  // the strongest direction is the planted one
  for (std::size_t i = 1; i < cache.eigenvalues().size(); ++i)
    EXPECT_GE(cache.eigenvalues()[i - 1], cache.eigenvalues()[i]);
  // The point of the method: on keys with one dominant direction, keeping the principal
  // coordinates at int8 beats an isotropic quantizer of the same bit width.
  auto mse = build("turboquant_mse", d, 2);
  for (int t = 0; t < 100; ++t) mse->append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
  const std::vector<float> exact = exact_attention(keys, values, q);
  const double spectral_error = relative_error(cache.attend(q), exact);
  const double mse_error = relative_error(mse->attend(q), exact);
  std::printf("planted-direction keys, 2 bits: spectral %.3f vs turboquant_mse %.3f\n", spectral_error, mse_error);
  EXPECT_LT(spectral_error, mse_error);
  EXPECT_EQ(SpectralCache::key_bytes(c), (4 + 2) + (2 + 28 * 2 / 8) + (2 + 28 / 8 + 1));
  cache.reset();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(cache.calibrated());  // reset keeps the calibration
}

}  // namespace
}  // namespace veloxquant

namespace veloxquant {
namespace {

TEST(StandaloneCaches, OutlierTwoStreamIsolatesStrongChannels) {
  const int d = 64, n = 300;
  auto keys = gaussian_rows(n, d, 21);
  for (auto& k : keys)
    for (int c : {3, 17, 40, 41}) k[static_cast<std::size_t>(c)] *= 25.0f;  // four outlier channels
  const auto values = gaussian_rows(n, d, 22);
  const auto queries = gaussian_rows(6, d, 23, 0.05f);
  auto make = [&](bool two_stream) {
    return KVCacheBuilder()
        .with_method("turboquant_mse")
        .with_head_dim(d)
        .with_bit_width(2)
        .with_outlier_two_stream(two_stream)
        .with_n_outlier_channels(4)
        .with_n_calib_tokens(32)
        .build()
        .standalone();
  };
  auto plain = make(false), split = make(true);
  for (int t = 0; t < n; ++t) {
    plain->append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
    split->append(keys[static_cast<std::size_t>(t)], values[static_cast<std::size_t>(t)]);
  }
  const auto& cache = dynamic_cast<const QuantizerStandaloneCache&>(*split);
  EXPECT_EQ(cache.outlier_channels(), (std::vector<int>{3, 17, 40, 41}));
  // A key after calibration decodes with its outlier channels at int8 precision.
  const std::vector<float> k299 = cache.decode_key(299 % 512);
  for (int c : {3, 17, 40, 41})
    EXPECT_NEAR(k299[static_cast<std::size_t>(c)], keys[299][static_cast<std::size_t>(c)],
                std::fabs(keys[299][static_cast<std::size_t>(c)]) * 0.02f + 0.5f);
  double plain_err = 0, split_err = 0;
  for (const auto& q : queries) {
    const auto exact = exact_attention(keys, values, q);
    plain_err += relative_error(plain->attend(q), exact);
    split_err += relative_error(split->attend(q), exact);
  }
  std::printf("outlier keys, 2 bits: two-stream %.3f vs plain %.3f mean attention error\n", split_err / 6,
              plain_err / 6);
  EXPECT_LT(split_err, plain_err);
  // Slot bytes: the code, then 4 int8 outliers and an f16 scale; 300 tokens -> 512 slots.
  EXPECT_EQ(split->memory_bytes() - plain->memory_bytes(),
            std::size_t{512} * (4 + 2) + sizeof(double) * d + sizeof(int) * 4);
  EXPECT_THROW(KVCacheBuilder().with_method("turboquant_mse").with_head_dim(d).with_outlier_two_stream(true).build(),
               QuantizerConfigError);  // needs n_outlier_channels
}

}  // namespace
}  // namespace veloxquant
