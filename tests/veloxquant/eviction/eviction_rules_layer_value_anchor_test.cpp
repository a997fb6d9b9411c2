// The eviction methods of issue 13's second half, each against a brute-force implementation of
// its rule (spec §6 rows 25, 37, 38; §4.3 "SqueezeAttention"), and their validation errors
// (spec §3.4: QuantizerConfigError naming the field and the value):
//   squeeze   per-layer budgets from the layers' key concentration (pairwise cosines, Python
//             rounding), resolved once every layer reported; rows past a lower budget evicted
//             by score, the storage reallocated for exactly the new budget
//   curdkv    value leverage in the top rank_cap singular directions of the attention-weighted
//             values, accumulated, victims by mean per step (eigenvectors by Jacobi here)
//   nestedkv  anchor anomalies (global / block / recent means), head blend and surprise gate,
//             every call rescoring stored + new rows
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "support/kv_test_data.h"
#include "veloxquant/caches/spectral_cache.h"
#include "veloxquant/eviction/anchor_scores.h"
#include "veloxquant/eviction/eviction_test_config.h"
#include "veloxquant/eviction/leverage_scores.h"

namespace veloxquant {
namespace {

using eviction_test::expect_config_error;
using eviction_test::make_eviction_cache;
using eviction_test::small_budget;

std::vector<float> random_rows(int64_t rows, int64_t dim, uint64_t seed, float scale = 1.0f) {
  std::vector<float> x = test_support::random_kv(1, 1, rows, dim, seed, lm::DType::F32).to_f32();
  for (float& v : x) v *= scale;
  return x;
}

// Feeds one head's keys and values (tokens x dim, f32) to `cache` in calls of `chunk` tokens,
// calling `check(tokens fed so far)` after each call.
void feed(lm::KVCache& cache, const std::vector<float>& keys, const std::vector<float>& values, int64_t tokens,
          int64_t dim, int64_t chunk, const std::function<void(int64_t)>& check) {
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t n = std::min(chunk, tokens - t0);
    const auto part = [&](const std::vector<float>& x) {
      return lm::Tensor::from_f32(std::vector<float>(x.begin() + t0 * dim, x.begin() + (t0 + n) * dim), {1, 1, n, dim},
                                  lm::DType::F32);
    };
    cache.update_and_fetch(part(keys), part(values));
    check(t0 + n);
  }
}

std::vector<int32_t> stored_positions(const eviction::EvictionCache& cache, int64_t h = 0) {
  const int32_t* p = cache.rows().positions(0, h);
  return {p, p + cache.rows().rows()};
}

// --- the eigen-decomposition and the leverage scores -------------------------------------------

TEST(LeverageScores, TridiagonalQREqualsJacobi) {
  for (int n : {1, 2, 5, 16, 64}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> x = random_rows(n + 7, n, 100 + static_cast<uint64_t>(n));
    std::vector<double> gram(static_cast<std::size_t>(n * n), 0.0);
    for (int r = 0; r < n + 7; ++r)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) gram[i * n + j] += double(x[r * n + i]) * x[r * n + j];
    std::vector<double> values, vectors, want_values, want_vectors;
    eviction::symmetric_eigen_descending(gram, n, values, vectors);
    symmetric_eigen(gram, n, want_values, want_vectors);
    for (int r = 0; r < n; ++r) {
      EXPECT_NEAR(values[r], want_values[r], 1e-9 * (1.0 + std::fabs(want_values[0])));
      // A v = lambda v, |v| = 1.
      double norm = 0.0;
      for (int i = 0; i < n; ++i) {
        double av = 0.0;
        for (int j = 0; j < n; ++j) av += gram[i * n + j] * vectors[r * n + j];
        EXPECT_NEAR(av, values[r] * vectors[r * n + i], 1e-9 * (1.0 + std::fabs(want_values[0])));
        norm += vectors[r * n + i] * vectors[r * n + i];
      }
      EXPECT_NEAR(norm, 1.0, 1e-12);
    }
  }
}

constexpr int kEigenN = 24;

// The Gram matrix (kEigenN x kEigenN) of `rows` random rows.
std::vector<double> random_gram(int rows) {
  const std::vector<float> x = random_rows(rows, kEigenN, 300 + static_cast<uint64_t>(rows));
  std::vector<double> gram(std::size_t{kEigenN} * kEigenN, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < kEigenN; ++i)
      for (int64_t j = 0; j < kEigenN; ++j) gram[i * kEigenN + j] += double(x[r * kEigenN + i]) * x[r * kEigenN + j];
  return gram;
}

// Eigenvalues (7, 7, 7, 3, 1, ...) in a rotated basis: Q diag Q^T, Q from Jacobi of `basis`.
std::vector<double> repeated_top_eigenvalue(const std::vector<double>& basis) {
  std::vector<double> ev, q;
  symmetric_eigen(basis, kEigenN, ev, q);
  std::vector<double> a(std::size_t{kEigenN} * kEigenN, 0.0);
  for (int64_t t = 0; t < kEigenN; ++t) {
    const double lambda = t < 3 ? 7.0 : t == 3 ? 3.0 : 1.0 / (1.0 + static_cast<double>(t));
    for (int64_t i = 0; i < kEigenN; ++i)
      for (int64_t j = 0; j < kEigenN; ++j) a[i * kEigenN + j] += lambda * q[t * kEigenN + i] * q[t * kEigenN + j];
  }
  return a;
}

// The top k eigenpairs of `matrix` by inverse iteration: Jacobi's top k eigenvalues, eigenpairs
// to rounding, and the projector onto their span Jacobi's.
void check_top_eigenvectors(const std::vector<double>& matrix, int k) {
  constexpr int64_t kN = kEigenN;
  std::vector<double> values, vectors, want_values, want_vectors;
  eviction::top_symmetric_eigenvectors(matrix, kEigenN, k, values, vectors);
  symmetric_eigen(matrix, kEigenN, want_values, want_vectors);
  ASSERT_EQ(values.size(), static_cast<std::size_t>(k));
  for (int64_t t = 0; t < k; ++t) EXPECT_NEAR(values[t], want_values[t], 1e-9 * (1.0 + want_values[0]));
  for (int64_t t = 0; t < k; ++t) {  // eigenpairs to rounding: |A u - lambda u| <= 1e-13 |lambda_1|
    for (int64_t i = 0; i < kN; ++i) {
      double au = 0.0;
      for (int64_t j = 0; j < kN; ++j) au += matrix[i * kN + j] * vectors[t * kN + j];
      EXPECT_NEAR(au, values[t] * vectors[t * kN + i], 1e-13 * want_values[0]) << "vector " << t << " row " << i;
    }
  }
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double p = 0.0, want = 0.0;
      for (int64_t t = 0; t < k; ++t) {
        p += vectors[t * kN + i] * vectors[t * kN + j];
        want += want_vectors[t * kN + i] * want_vectors[t * kN + j];
      }
      EXPECT_NEAR(p, want, 1e-8) << i << "," << j;
    }
  }
}

// The top k eigenvectors by inverse iteration span what Jacobi's top k span (the projectors agree),
// also for a repeated top eigenvalue and a rank-deficient Gram matrix.
TEST(LeverageScores, TopEigenvectorsSpanJacobisTopSubspace) {
  // Full rank, rank 5 (19 zero eigenvalues), and the repeated top eigenvalue.
  std::vector<std::vector<double>> matrices{random_gram(60), random_gram(5)};
  matrices.push_back(repeated_top_eigenvalue(matrices[0]));
  for (std::size_t m = 0; m < matrices.size(); ++m) {
    for (int k : {1, 3, 4, 5}) {
      SCOPED_TRACE("matrix " + std::to_string(m) + " k " + std::to_string(k));
      if (m == 2 && (k == 1 || k == 2)) continue;  // the top space splits a repeated eigenvalue
      ASSERT_NO_FATAL_FAILURE(check_top_eigenvectors(matrices[m], k));
    }
  }
}

// Brute force: the block's singular directions from Jacobi, l_j = sum_t <m_j, u_t>^2 over the top
// k = min(cap, rows, dim), normalised to sum 1.
std::vector<double> reference_leverage(const std::vector<float>& values, int64_t rows, int64_t dim,
                                       const std::vector<float>& weights, int64_t cap) {
  std::vector<double> m(static_cast<std::size_t>(rows * dim));
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t i = 0; i < dim; ++i) m[j * dim + i] = double(weights[j]) * values[j * dim + i];
  std::vector<double> gram(static_cast<std::size_t>(dim * dim), 0.0);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t a = 0; a < dim; ++a)
      for (int64_t b = 0; b < dim; ++b) gram[a * dim + b] += m[j * dim + a] * m[j * dim + b];
  std::vector<double> ev, vec;
  symmetric_eigen(gram, static_cast<int>(dim), ev, vec);
  const int64_t k = std::max<int64_t>(1, std::min({cap, rows, dim}));
  std::vector<double> l(static_cast<std::size_t>(rows), 0.0);
  double total = 0.0;
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t t = 0; t < k; ++t) {
      double dot = 0.0;
      for (int64_t i = 0; i < dim; ++i) dot += m[j * dim + i] * vec[t * dim + i];
      l[j] += dot * dot;
    }
    total += l[j];
  }
  for (double& x : l) x = total > 0 ? x / total : 0.0;
  return l;
}

TEST(LeverageScores, EqualBruteForce) {
  constexpr int64_t kDim = 16;
  for (int64_t rows : {1, 3, 10, 40}) {
    for (int64_t cap : {1, 4, 16, 100}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " cap " + std::to_string(cap));
      const std::vector<float> v = random_rows(rows, kDim, 7 + static_cast<uint64_t>(rows));
      std::vector<float> w = random_rows(rows, 1, 9);
      for (float& x : w) x = std::fabs(x) + 0.01f;
      std::vector<float> got(static_cast<std::size_t>(rows));
      eviction::value_leverage_scores(v.data(), nullptr, rows, kDim, w.data(), cap, got.data());
      const std::vector<double> want = reference_leverage(v, rows, kDim, w, cap);
      double sum = 0.0;
      for (int64_t j = 0; j < rows; ++j) {
        EXPECT_NEAR(got[j], want[j], 1e-6);
        sum += got[j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      // The last row's alone (its total from the top eigenvalues instead of the rows' sum).
      const float self = eviction::value_self_leverage(v.data(), nullptr, rows, kDim, w.data(), cap);
      EXPECT_NEAR(self, want.back(), 1e-6);
      EXPECT_NEAR(self, got.back(), 1e-6 * got.back());
    }
  }
  {  // 512 rows of 64 (curdkv's default shapes): the last row's score agrees to float rounding
    constexpr int64_t kRows = 512, kWide = 64;
    const std::vector<float> v = random_rows(kRows, kWide, 21);
    std::vector<float> w = random_rows(kRows, 1, 23);
    for (float& x : w) x = std::exp(2.0f * x);
    std::vector<float> all(kRows);
    eviction::value_leverage_scores(v.data(), nullptr, kRows, kWide, w.data(), 16, all.data());
    const float self = eviction::value_self_leverage(v.data(), nullptr, kRows, kWide, w.data(), 16);
    EXPECT_NEAR(self, all.back(), 1e-6 * all.back());
  }
  // Fewer independent rows than the rank cap but more rows than it (rank r < 16 < rows): the top
  // 16 end in numerically zero eigenvalues, whose directions carry no energy in the original's
  // weighting; the scores still equal the brute force's.
  for (int64_t rank : {3, 8, 12, 15}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    constexpr int64_t kRows = 40, kWide = 64;
    const std::vector<float> basis = random_rows(rank, kWide, 40 + static_cast<uint64_t>(rank));
    const std::vector<float> mix = random_rows(kRows, rank, 50 + static_cast<uint64_t>(rank));
    std::vector<float> v(static_cast<std::size_t>(kRows * kWide), 0.0f);
    for (int64_t j = 0; j < kRows; ++j)
      for (int64_t r = 0; r < rank; ++r)
        for (int64_t i = 0; i < kWide; ++i) v[j * kWide + i] += mix[j * rank + r] * basis[r * kWide + i];
    std::vector<float> w = random_rows(kRows, 1, 60);
    for (float& x : w) x = std::exp(x);
    std::vector<float> got(kRows);
    eviction::value_leverage_scores(v.data(), nullptr, kRows, kWide, w.data(), 16, got.data());
    const std::vector<double> want = reference_leverage(v, kRows, kWide, w, 16);
    for (int64_t j = 0; j < kRows; ++j) EXPECT_NEAR(got[j], want[j], 1e-6) << "row " << j;
    EXPECT_NEAR(eviction::value_self_leverage(v.data(), nullptr, kRows, kWide, w.data(), 16), want.back(), 1e-6);
  }
  // Rows picked by index; an all-zero block scores 0.
  const std::vector<float> v = random_rows(6, kDim, 3);
  const std::vector<int32_t> pick = {5, 1, 3};
  const std::vector<float> w = {0.5f, 0.25f, 0.25f};
  std::vector<float> picked;
  for (int32_t r : pick) picked.insert(picked.end(), v.begin() + r * kDim, v.begin() + (r + 1) * kDim);
  std::vector<float> got(3), zero(3, 1.0f);
  eviction::value_leverage_scores(v.data(), pick.data(), 3, kDim, w.data(), 2, got.data());
  const std::vector<double> want = reference_leverage(picked, 3, kDim, w, 2);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(got[j], want[j], 1e-6);
  EXPECT_NEAR(eviction::value_self_leverage(v.data(), pick.data(), 3, kDim, w.data(), 2), want.back(), 1e-6);
  const std::vector<float> no_weight(3, 0.0f);
  eviction::value_leverage_scores(v.data(), pick.data(), 3, kDim, no_weight.data(), 2, zero.data());
  EXPECT_EQ(zero, std::vector<float>(3, 0.0f));
  EXPECT_EQ(eviction::value_self_leverage(v.data(), pick.data(), 3, kDim, no_weight.data(), 2), 0.0f);
}

// --- curdkv --------------------------------------------------------------------------------------

struct CurRow {
  int64_t pos;
  std::vector<float> key, value;
  double score;
};

// CurDKV per token, brute force in doubles with the key-as-query proxy: the new key's softmax over
// the stored rows weights their values; their leverage adds to their scores; the new row starts
// at its leverage among them and itself (first token: 1); over budget the lowest score / (1 +
// newest position - position) outside the sinks goes (the first minimum).
void curdkv_reference_step(std::vector<CurRow>& rows, CurRow incoming, int64_t budget, int64_t n_sink, int64_t cap) {
  const int64_t dim = static_cast<int64_t>(incoming.key.size());
  const std::vector<float> query = incoming.key;
  const auto leverage = [&](std::size_t count) {
    std::vector<double> e(count);
    double mx = -INFINITY, total = 0.0;
    for (std::size_t j = 0; j < count; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < dim; ++d) dot += double(rows[j].key[d]) * query[d];
      mx = std::max(mx, e[j] = dot / std::sqrt(double(dim)));
    }
    for (double& x : e) total += (x = std::exp(x - mx));
    std::vector<float> w(count), v;
    for (std::size_t j = 0; j < count; ++j) {
      w[j] = static_cast<float>(e[j] / total);
      v.insert(v.end(), rows[j].value.begin(), rows[j].value.end());
    }
    return reference_leverage(v, static_cast<int64_t>(count), static_cast<int64_t>(rows[0].value.size()), w, cap);
  };
  if (rows.empty()) {
    incoming.score = 1.0;
    rows.push_back(std::move(incoming));
    return;
  }
  const std::vector<double> stored = leverage(rows.size());
  for (std::size_t j = 0; j < rows.size(); ++j) rows[j].score += stored[j];
  rows.push_back(std::move(incoming));
  rows.back().score = leverage(rows.size()).back();
  if (static_cast<int64_t>(rows.size()) <= budget) return;
  const double step = double(rows.back().pos);
  std::size_t victim = rows.size();
  double best = 0.0;
  for (std::size_t j = 0; j < rows.size(); ++j) {
    if (rows[j].pos < n_sink) continue;
    const double mean = rows[j].score / (1.0 + step - double(rows[j].pos));
    if (victim == rows.size() || mean < best) {
      victim = j;
      best = mean;
    }
  }
  rows.erase(rows.begin() + static_cast<std::ptrdiff_t>(victim));
}

TEST(EvictionRules, CurDKVEqualsBruteForce) {
  constexpr int64_t kDim = 16, kTokens = 100, kBudget = 12, kSinks = 2;
  for (int cap : {3, 16}) {
    for (int64_t chunk : {1, 9}) {
      SCOPED_TRACE("cap " + std::to_string(cap) + " chunk " + std::to_string(chunk));
      KVCacheConfig c = small_budget("curdkv", kBudget, kDim);
      c.options<CurDKVOptions>().curdkv_n_sink = kSinks;
      c.options<CurDKVOptions>().curdkv_rank_cap = cap;
      c.eviction.eviction_scoring = "proxy";
      auto cache = make_eviction_cache(c);
      EXPECT_TRUE(cache->policy().uses_attention());
      const std::vector<float> keys = random_rows(kTokens, kDim, 61, 0.25f), values = random_rows(kTokens, kDim, 62);
      std::vector<CurRow> ref;
      int64_t next = 0;
      feed(*cache, keys, values, kTokens, kDim, chunk, [&](int64_t fed) {
        for (; next < fed; ++next) {
          curdkv_reference_step(
              ref,
              {next, std::vector<float>(keys.begin() + next * kDim, keys.begin() + (next + 1) * kDim),
               std::vector<float>(values.begin() + next * kDim, values.begin() + (next + 1) * kDim), 0.0},
              kBudget, kSinks, cap);
        }
        std::vector<int32_t> want;
        want.reserve(ref.size());
        for (const CurRow& r : ref) want.push_back(static_cast<int32_t>(r.pos));
        ASSERT_EQ(stored_positions(*cache), want) << "after " << fed << " tokens";
        for (std::size_t j = 0; j < ref.size(); ++j) {
          EXPECT_NEAR(cache->rows().scores(0, 0)[j], ref[j].score, 1e-5 * (1.0 + ref[j].score));
        }
      });
    }
  }
}

// The value side counts: two tokens with the same key but values of different size receive
// different leverage (a key-only rule could not tell them apart).
TEST(EvictionRules, CurDKVScoresValuesNotOnlyKeys) {
  constexpr int64_t kDim = 16;
  KVCacheConfig c = small_budget("curdkv", 16, kDim);
  c.eviction.eviction_scoring = "proxy";
  auto cache = make_eviction_cache(c);
  std::vector<float> keys = random_rows(6, kDim, 5, 0.25f), values = random_rows(6, kDim, 6);
  std::copy(keys.begin() + 2 * kDim, keys.begin() + 3 * kDim, keys.begin() + 3 * kDim);  // key 3 = key 2
  for (int64_t d = 0; d < kDim; ++d) values[3 * kDim + d] = 4.0f * values[2 * kDim + d];
  feed(*cache, keys, values, 6, kDim, 6, [](int64_t) {});
  const float* s = cache->rows().scores(0, 0);
  // Row 3 arrived a step later: compare mean leverage per step.
  EXPECT_GT(s[3] / 3.0f, 1.5f * s[2] / 4.0f) << s[2] << " " << s[3];
}

TEST(EvictionRules, CurDKVValidation) {
  KVCacheConfig c = small_budget("curdkv", 32);
  c.options<CurDKVOptions>().curdkv_rank_cap = 0;
  expect_config_error(c, {"curdkv_rank_cap", "0"});
  c = small_budget("curdkv", 32);
  c.options<CurDKVOptions>().curdkv_n_sink = 32;
  expect_config_error(c, {"curdkv_n_sink", "32", "curdkv_budget", "nothing evictable"});
  c = small_budget("curdkv", 32);
  c.options<CurDKVOptions>().curdkv_rope_base = 500000.0;
  expect_config_error(c, {"curdkv_rope_base", "500000", "no effect"});
}

// --- nestedkv ------------------------------------------------------------------------------------

// The anchor scores by brute force: every mean summed directly for each key, the gap from a sorted
// copy, the population std of the three anomalies.
std::vector<double> reference_anchor_scores(const std::vector<std::vector<double>>& keys, int64_t window, double beta,
                                            double tau, double kappa) {
  const std::size_t n = keys.size(), dim = keys[0].size();
  std::vector<std::vector<double>> u(n, std::vector<double>(dim));
  for (std::size_t i = 0; i < n; ++i) {
    double norm = 0.0;
    for (double x : keys[i]) norm += x * x;
    for (std::size_t d = 0; d < dim; ++d) u[i][d] = keys[i][d] / std::max(std::sqrt(norm), 1e-12);
  }
  const auto anomaly_against_mean = [&](std::size_t i, std::size_t lo, std::size_t hi) {
    double dot = 0.0;
    for (std::size_t d = 0; d < dim; ++d) {
      double mean = 0.0;
      for (std::size_t j = lo; j < hi; ++j) mean += u[j][d];
      dot += u[i][d] * mean / double(hi - lo);
    }
    return -dot;
  };
  const std::size_t block = std::min<std::size_t>(std::clamp<std::size_t>(n / 32, 128, 256), n);
  std::vector<std::vector<double>> a(3, std::vector<double>(n));
  for (std::size_t i = 0; i < n; ++i) {
    a[0][i] = anomaly_against_mean(i, 0, n);
    const std::size_t start = i / block * block;
    a[1][i] = anomaly_against_mean(i, start, std::min(start + block, n));
    a[2][i] = anomaly_against_mean(i, i + 1 >= static_cast<std::size_t>(window) ? i + 1 - window : 0, i + 1);
  }
  const auto normalise = [](std::vector<double>& x) {
    const double lo = *std::min_element(x.begin(), x.end()), hi = *std::max_element(x.begin(), x.end());
    for (double& v : x) v = hi - lo <= 1e-12 ? 0.0 : (v - lo) / (hi - lo);
  };
  for (auto& s : a) normalise(s);
  std::vector<double> w = {0.4, 0.4, 0.2};
  if (n > 1) {
    // Python's round(n * 0.1): the product as a double, halves to even.
    const double tenth = double(n) * 0.1;
    double k = std::nearbyint(tenth);  // default rounding mode: to nearest, ties to even
    k = std::max(1.0, k);
    std::vector<double> logits(3);
    double total = 0.0;
    for (int s = 0; s < 3; ++s) {
      std::vector<double> sorted = a[s];
      std::sort(sorted.begin(), sorted.end());
      double gap = 0.0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(k); ++i) gap += sorted[n - 1 - i] - sorted[i];
      logits[s] = std::exp(std::log(w[s]) + beta * gap / k);
      total += logits[s];
    }
    for (int s = 0; s < 3; ++s) w[s] = logits[s] / total;
  }
  std::vector<double> surprise(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double m = (a[0][i] + a[1][i] + a[2][i]) / 3.0;
    double var = 0.0;
    for (int s = 0; s < 3; ++s) var += (a[s][i] - m) * (a[s][i] - m);
    surprise[i] = std::sqrt(var / 3.0);
  }
  normalise(surprise);
  const double centre = std::accumulate(surprise.begin(), surprise.end(), 0.0) / double(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double alpha = 1.0 / (1.0 + std::exp(-kappa * (surprise[i] - centre - tau)));
    const double blend = w[0] * a[0][i] + w[1] * a[1][i] + w[2] * a[2][i];
    out[i] = (1 - alpha) * blend + alpha * std::max({a[0][i], a[1][i], a[2][i]});
  }
  return out;
}

TEST(EvictionRules, NestedKVAnchorScoresEqualBruteForce) {
  constexpr int64_t kDim = 16;
  for (int64_t n : {1, 2, 25, 300}) {  // 300 keys: blocks of 128; 25: round(2.5) = 3 in floating point
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> k = random_rows(n, kDim, 70 + static_cast<uint64_t>(n));
    std::vector<std::vector<double>> keys(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) keys[i].assign(k.begin() + i * kDim, k.begin() + (i + 1) * kDim);
    std::vector<float> got(static_cast<std::size_t>(n));
    eviction::nested_anchor_scores(k.data(), nullptr, n, kDim, {24, 3.0, 0.6, 10.0}, got.data());
    const std::vector<double> want = reference_anchor_scores(keys, 24, 3.0, 0.6, 10.0);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "key " << i;
  }
}

TEST(EvictionRules, NestedKVKeepsTheMostAnomalousOfEveryCall) {
  constexpr int64_t kDim = 16, kTokens = 150, kBudget = 20, kSinks = 3, kWindow = 8;
  const std::vector<float> keys = random_rows(kTokens, kDim, 81);
  for (int64_t chunk : {1, 7, 150}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    KVCacheConfig c = small_budget("nestedkv", kBudget, kDim);
    NestedKVOptions& o = c.options<NestedKVOptions>();
    o.nestedkv_n_sink = kSinks;
    o.nestedkv_window = kWindow;
    o.nestedkv_beta = 2.0;
    auto cache = make_eviction_cache(c);
    EXPECT_FALSE(cache->wants_queries());
    EXPECT_FALSE(cache->rows().keeps_scores());  // nothing is carried between calls
    std::vector<int64_t> kept;
    feed(*cache, keys, keys, kTokens, kDim, chunk, [&](int64_t fed) {
      for (int64_t t = fed - std::min(chunk, fed - (fed - 1) / chunk * chunk); t < fed; ++t) kept.push_back(t);
      if (static_cast<int64_t>(kept.size()) > kBudget) {
        std::vector<std::vector<double>> k;
        k.reserve(kept.size());
        for (int64_t p : kept) k.emplace_back(keys.begin() + p * kDim, keys.begin() + (p + 1) * kDim);
        const std::vector<double> score = reference_anchor_scores(k, kWindow, 2.0, 0.6, 10.0);
        std::vector<std::size_t> rest;
        std::vector<int64_t> next;
        for (std::size_t i = 0; i < kept.size(); ++i) (kept[i] < kSinks ? next.push_back(kept[i]) : rest.push_back(i));
        std::stable_sort(rest.begin(), rest.end(), [&](std::size_t a, std::size_t b) { return score[a] > score[b]; });
        for (std::size_t i = 0; i + kSinks < static_cast<std::size_t>(kBudget); ++i) next.push_back(kept[rest[i]]);
        std::sort(next.begin(), next.end());
        kept = next;
      }
      const std::vector<int32_t> got = stored_positions(*cache);
      ASSERT_EQ(std::vector<int64_t>(got.begin(), got.end()), kept) << "after " << fed << " tokens";
    });
  }
}

TEST(EvictionRules, NestedKVValidation) {
  KVCacheConfig c = small_budget("nestedkv", 32);
  c.options<NestedKVOptions>().nestedkv_window = 0;
  expect_config_error(c, {"nestedkv_window", "0"});
  c = small_budget("nestedkv", 32);
  c.options<NestedKVOptions>().nestedkv_safeguard_alpha = 1.5;
  expect_config_error(c, {"nestedkv_safeguard_alpha", "1.5"});
  c = small_budget("nestedkv", 32);
  c.options<NestedKVOptions>().nestedkv_safeguard_alpha = 0.5;
  expect_config_error(c, {"nestedkv_safeguard_alpha", "0.5", "no effect"});
  c = small_budget("nestedkv", 32);
  c.options<NestedKVOptions>().nestedkv_tau = std::nan("");
  expect_config_error(c, {"nestedkv_tau"});
  c = small_budget("nestedkv", 32);
  c.options<NestedKVOptions>().nestedkv_n_sink = 40;
  expect_config_error(c, {"nestedkv_n_sink", "40", "nothing evictable"});
}

// --- save / restore of the new policies ----------------------------------------------------------

TEST(EvictionRules, CurDKVAndNestedKVSurviveRestoreAndClone) {
  for (const std::string method : {"curdkv", "nestedkv"}) {
    SCOPED_TRACE(method);
    KVCacheConfig c = small_budget(method, 16);
    if (method == "curdkv") c.options<CurDKVOptions>().curdkv_rank_cap = 5;
    if (method == "nestedkv") c.options<NestedKVOptions>().nestedkv_window = 7;
    auto cache = make_eviction_cache(c);
    const lm::Tensor k = test_support::random_kv(1, 2, 40, 32, 3), v = test_support::random_kv(1, 2, 40, 32, 4);
    cache->update_and_fetch(k, v);
    auto restored = require_method(method).make_restorable();
    restored->from_state(cache->state(), cache->meta_state());
    auto copy = cache->clone();
    for (int step = 0; step < 20; ++step) {
      const lm::Tensor k1 = test_support::random_kv(1, 2, 1, 32, 10 + step),
                       v1 = test_support::random_kv(1, 2, 1, 32, 50 + step);
      const std::vector<float> want = cache->update_and_fetch(k1, v1).keys.to_f32();
      ASSERT_EQ(restored->update_and_fetch(k1, v1).keys.to_f32(), want) << "step " << step;
      ASSERT_EQ(copy->update_and_fetch(k1, v1).keys.to_f32(), want) << "step " << step;
    }
  }
}

// --- squeeze -------------------------------------------------------------------------------------

TEST(SqueezeSchedule, ConcentrationIsTheMeanPairwiseCosine) {
  constexpr int64_t kDim = 8;
  for (int64_t rows : {0, 1, 2, 9}) {
    const std::vector<float> k = random_rows(std::max<int64_t>(rows, 1), kDim, 90 + static_cast<uint64_t>(rows));
    double want = 0.0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < rows; ++j) {
        if (i == j) continue;
        double ab = 0, aa = 0, bb = 0;
        for (int64_t d = 0; d < kDim; ++d) {
          ab += double(k[i * kDim + d]) * k[j * kDim + d];
          aa += double(k[i * kDim + d]) * k[i * kDim + d];
          bb += double(k[j * kDim + d]) * k[j * kDim + d];
        }
        want += ab / ((std::sqrt(aa) + 1e-8) * (std::sqrt(bb) + 1e-8));
      }
    }
    if (rows >= 2) want /= double(rows * (rows - 1));
    EXPECT_NEAR(eviction::concentration_score(k.data(), rows, kDim), want, 1e-12) << rows << " rows";
  }
}

TEST(SqueezeSchedule, BudgetsFollowTheOriginalsFormula) {
  // raw = 1 - c = (0.9, 0.5, 0.1, 1.0 (c < 0 clamps to 0)); sum 2.5; weights raw * 4 / 2.5 =
  // (1.44, 0.8, 0.16, 1.6); avg 100 -> (144, 80, 16, 160); the floor n_sink + 1 = 20 lifts 16.
  EXPECT_EQ(eviction::squeeze_budgets({0.1, 0.5, 0.9, -0.3}, 100, 19, 1.0), (std::vector<int>{144, 80, 20, 160}));
  // Strength 0.5 halves the move: 100 * (0.5 + 0.5 * w).
  EXPECT_EQ(eviction::squeeze_budgets({0.1, 0.5, 0.9, -0.3}, 100, 4, 0.5), (std::vector<int>{122, 90, 58, 130}));
  EXPECT_EQ(eviction::squeeze_budgets({0.1, 0.5, 0.9}, 100, 4, 0.0), (std::vector<int>{100, 100, 100}));
  // Every layer fully concentrated: uniform. One layer: max(avg, floor).
  EXPECT_EQ(eviction::squeeze_budgets({1.0, 1.5}, 64, 4, 1.0), (std::vector<int>{64, 64}));
  EXPECT_EQ(eviction::squeeze_budgets({0.3}, 3, 4, 1.0), (std::vector<int>{5}));
  // Python's round: halves to even. raw (0.5, 0.5, 0.25, 0.75): weights (1, 1, 0.5, 1.5), avg 5
  // -> 5, 5, 2.5 -> 2 (floor 1), 7.5 -> 8.
  EXPECT_EQ(eviction::squeeze_budgets({0.5, 0.5, 0.75, 0.25}, 5, 0, 1.0), (std::vector<int>{5, 5, 2, 8}));
  EXPECT_THROW(eviction::squeeze_budgets({0.5}, 10, 1, 1.5), QuantizerConfigError);
}

TEST(SqueezeSchedule, FirstReportWinsAndResolvesOnce) {
  eviction::SqueezeSchedule s(3, 100, 4, 1.0);
  s.report(0, 0.1);
  s.report(0, 0.9);  // ignored: the first report wins
  s.report(1, 0.5);
  EXPECT_FALSE(s.budget(0));
  s.report(2, 0.9);
  ASSERT_TRUE(s.budget(0));
  EXPECT_EQ(*s.budget(0), 180);  // raw (0.9, 0.5, 0.1): weights (1.8, 1, 0.2)
  EXPECT_EQ(*s.budget(1), 100);
  EXPECT_EQ(*s.budget(2), 20);
  s.report(2, 0.0);  // frozen
  EXPECT_EQ(*s.budget(2), 20);
}

// Three layers wired by for_model's hook: each runs at squeeze_budget until all three reported,
// then at its own budget; a layer whose budget dropped below what it holds keeps its sinks, its
// newest grace rows and its best-scored rest, and its storage is exactly the new budget.
TEST(EvictionRules, SqueezeLayersTakeTheirScheduledBudgets) {
  constexpr int64_t kDim = 16, kHeads = 2, kAvg = 24;
  KVCacheConfig c = small_budget("squeeze", kAvg, kDim);
  SqueezeOptions& o = c.options<SqueezeOptions>();
  o.squeeze_n_sink = 2;
  o.squeeze_grace = 3;
  c.eviction.eviction_scoring = "proxy";
  const LayerCacheFactory make = require_method("squeeze").wire_model(c, 3);
  std::vector<std::shared_ptr<eviction::EvictionCache>> layers;
  for (std::size_t i = 0; i < 3; ++i) layers.push_back(std::dynamic_pointer_cast<eviction::EvictionCache>(make(c, i)));
  // Layer 0's keys spread out, layer 2's cluster around one direction.
  std::vector<lm::Tensor> first(3);
  std::vector<double> concentration(3);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> k = test_support::random_kv(1, kHeads, 40, kDim, 200 + i, lm::DType::F32).to_f32();
    for (std::size_t j = 0; j < k.size(); ++j) k[j] += float(i) * 1.5f * (j % 2 == 0 ? 1.0f : 0.5f);
    first[i] = lm::Tensor::from_f32(k, {1, kHeads, 40, kDim}, lm::DType::F32);
    concentration[i] = eviction::layer_concentration(first[i]);
  }
  const std::vector<int> budgets = eviction::squeeze_budgets(concentration, kAvg, 2, 1.0);
  ASSERT_GT(budgets[0], kAvg);
  ASSERT_LT(budgets[2], kAvg);
  for (int i = 0; i < 3; ++i) {
    layers[i]->update_and_fetch(first[i], first[i]);
    // Layers 0 and 1 stored under the average budget; layer 2 resolved the schedule first.
    EXPECT_EQ(layers[i]->policy().budget, i < 2 ? kAvg : budgets[2]) << "layer " << i;
  }
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> before_scores(layers[i]->rows().scores(0, 0),
                                           layers[i]->rows().scores(0, 0) + layers[i]->rows().rows());
    const std::vector<int32_t> before = stored_positions(*layers[i]);
    const lm::Tensor k = test_support::random_kv(1, kHeads, 1, kDim, 300 + i, lm::DType::F32);
    layers[i]->update_and_fetch(k, k);
    EXPECT_EQ(layers[i]->policy().budget, budgets[i]) << "layer " << i;
    EXPECT_EQ(layers[i]->rows().budget(), budgets[i]);
    const eviction::EvictionRows& r = layers[i]->rows();
    EXPECT_EQ(layers[i]->nbytes(),
              static_cast<std::size_t>(kHeads * budgets[i] * (2 * kDim * 4 + 4 + 4)));  // f32 rows, position, score
    if (i == 0) {
      // Grown: nothing evicted, the new token appended.
      std::vector<int32_t> want = before;
      want.push_back(40);
      EXPECT_EQ(stored_positions(*layers[i]), want);
    }
    EXPECT_LE(r.rows(), budgets[i]);
  }
}

TEST(EvictionRules, SqueezeShrinkKeepsSinksGraceAndBestScores) {
  constexpr int64_t kDim = 16;
  KVCacheConfig c = small_budget("squeeze", 30, kDim);
  SqueezeOptions& o = c.options<SqueezeOptions>();
  o.squeeze_n_sink = 2;
  o.squeeze_grace = 3;
  c.eviction.eviction_scoring = "proxy";
  // Two layers: layer 1 reports keys all along one direction (concentration ~1) and gets the floor
  // n_sink + 1 = 3; layer 0 gets the rest.
  const LayerCacheFactory make = require_method("squeeze").wire_model(c, 2);
  auto layer0 = std::dynamic_pointer_cast<eviction::EvictionCache>(make(c, 0));
  auto layer1 = std::dynamic_pointer_cast<eviction::EvictionCache>(make(c, 1));
  const std::vector<float> k0 = random_rows(28, kDim, 400);
  std::vector<float> k1(28 * kDim);
  for (int64_t t = 0; t < 28; ++t)
    for (int64_t d = 0; d < kDim; ++d) k1[t * kDim + d] = (1.0f + 0.01f * float(t)) * float(d + 1);
  feed(*layer0, k0, k0, 28, kDim, 28, [](int64_t) {});
  const std::vector<float> scores(layer0->rows().scores(0, 0), layer0->rows().scores(0, 0) + 28);
  feed(*layer1, k1, k1, 28, kDim, 28, [](int64_t) {});
  // Layer 1 resolved the schedule on its own first call: budget 3 = 2 sinks + 1.
  EXPECT_EQ(layer1->policy().budget, 3);
  EXPECT_EQ(layer1->rows().rows(), 3);
  EXPECT_EQ(layer0->policy().budget, 30);  // the average until its next call
  // The shrink itself, on layer 0's 28 scored rows down to 10, against brute force: sinks 0, 1; the newest
  // min(grace, 10 - 2 - 1) = 3 rows 25..27; the best 5 of 2..24.
  eviction::EvictionPolicy p = layer0->policy();
  p.budget = 10;
  eviction::Candidates cand;
  cand.stored = 28;
  cand.dim = kDim;
  for (int32_t t = 0; t < 28; ++t) cand.positions.push_back(t);
  cand.scores = scores;
  const std::vector<int32_t> kept = eviction::shrink_rows(p, cand);
  std::vector<int32_t> rest;
  for (int32_t t = 2; t < 25; ++t) rest.push_back(t);
  std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  std::vector<int32_t> want = {0, 1, 25, 26, 27};
  want.insert(want.end(), rest.begin(), rest.begin() + 5);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(kept, want);
}

TEST(EvictionRules, SqueezeValidation) {
  KVCacheConfig c = small_budget("squeeze", 32);
  c.options<SqueezeOptions>().squeeze_strength = 1.5;
  expect_config_error(c, {"squeeze_strength", "1.5"});
  c = small_budget("squeeze", 32);
  c.options<SqueezeOptions>().squeeze_strength = -0.1;
  expect_config_error(c, {"squeeze_strength", "-0.1"});
  c = small_budget("squeeze", 32);
  c.options<SqueezeOptions>().squeeze_n_sink = 32;
  expect_config_error(c, {"squeeze_n_sink", "32", "nothing evictable"});
  c = small_budget("squeeze", 32);
  c.options<SqueezeOptions>().squeeze_resolved_budget = 2;
  expect_config_error(c, {"squeeze_resolved_budget", "2", "nothing evictable"});
  c = small_budget("squeeze", 32);
  c.options<SqueezeOptions>().squeeze_grace = -1;
  expect_config_error(c, {"squeeze_grace", "-1"});
}

}  // namespace
}  // namespace veloxquant
