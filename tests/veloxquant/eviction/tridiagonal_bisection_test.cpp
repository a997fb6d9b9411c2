// The top eigenvalues of a symmetric tridiagonal matrix by Sturm bisection
// (tridiagonal_bisection.h), and curdkv's top eigenpairs built on them (leverage_scores.h):
//   - every SIMD target this machine runs gives the scalar reference's doubles bit for bit;
//   - the eigenvalues agree with the full QR solver (symmetric_eigen_descending) to rounding of |T|
//     on random, split (zero couplings), repeated, clustered (Wilkinson), rank-deficient and
//     badly scaled (1e-150, 1e150) tridiagonals;
//   - the Newton finish is as precise as plain bisection: within 4 units of |T|'s rounding of a
//     bisection written here (LAPACK's ratio-form count in long double) on graded tridiagonals
//     like a value Gram's, and on the cases above;
//   - top_symmetric_eigenvectors on 64 x 64 value Grams with peaked and flat spectra, a cluster
//     around the 16th eigenvalue and rank-deficient blocks (rank 40, 17 and 10): eigenpairs at the rounding floor and
//     the top-16 projector equal to the full solver's within 1e-13 / gap (Davis-Kahan at rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "veloxquant/eviction/leverage_scores.h"
#include "veloxquant/eviction/tridiagonal_bisection.h"
#include "support/simd_targets.h"
#include "tridiagonal_cases.h"

namespace veloxquant::eviction {
namespace {

using test_cases::Tri;

std::vector<std::pair<std::string, Tri>> tridiagonals() {
  std::mt19937 rng(21);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::pair<std::string, Tri>> out;
  for (int n : {1, 2, 3, 5, 17, 33, 64})
    out.emplace_back("random n " + std::to_string(n), test_cases::random_tridiagonal(n, rng, normal));
  out.emplace_back("split", test_cases::split_in_three(out.back().second));
  out.emplace_back("repeated", test_cases::repeated_diagonal());
  out.emplace_back("wilkinson", test_cases::wilkinson_65());
  {  // a PSD-like tridiagonal with 40 (numerically) zero trailing eigenvalues
    Tri t;
    for (int i = 0; i < 64; ++i) t.d.push_back(i < 24 ? std::exp(-0.3 * i) : 1e-19 * normal(rng));
    for (int i = 0; i < 63; ++i) t.e.push_back(i < 23 ? 0.1 * std::exp(-0.3 * i) : 1e-18 * normal(rng));
    out.emplace_back("rank deficient", t);
  }
  for (double scale : {1e-150, 1e150}) {
    out.emplace_back("scaled " + std::to_string(scale), test_cases::scaled(out[6].second, scale));  // random n 64
  }
  {
    Tri t;
    t.d.assign(20, 0.0);
    t.e.assign(19, 0.0);
    out.emplace_back("zero", t);
  }
  return out;
}

TEST(TridiagonalBisection, EverySimdTargetEqualsTheScalarReference) {
  for (const auto& named : tridiagonals()) {
    const std::string& name = named.first;
    const Tri& t = named.second;
    const int64_t n = static_cast<int64_t>(t.d.size());
    for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}, n}) {
      if (k > n) continue;
      SCOPED_TRACE(name + " k " + std::to_string(k));
      std::vector<double> want(static_cast<std::size_t>(k));
      scalar::top_tridiagonal_eigenvalues(t.d.data(), t.e.data(), n, k, want.data());
      test_support::for_each_simd_target([&](const char* target) {
        std::vector<double> got(static_cast<std::size_t>(k), -1.0);
        top_tridiagonal_eigenvalues(t.d.data(), t.e.data(), n, k, got.data());
        for (int64_t r = 0; r < k; ++r) EXPECT_EQ(got[r], want[r]) << target << " eigenvalue " << r;
      });
    }
  }
}

TEST(TridiagonalBisection, EigenvaluesEqualTheFullSolversToRounding) {
  for (const auto& [name, t] : tridiagonals()) {
    SCOPED_TRACE(name);
    const int n = static_cast<int>(t.d.size());
    std::vector<double> want, vectors;
    symmetric_eigen_descending(test_cases::dense(t), n, want, vectors);
    double norm = 0.0;
    for (int i = 0; i < n; ++i) {
      norm = std::max(
          norm, std::fabs(t.d[i]) + (i > 0 ? std::fabs(t.e[i - 1]) : 0.0) + (i + 1 < n ? std::fabs(t.e[i]) : 0.0));
    }
    std::vector<double> got(static_cast<std::size_t>(n));
    top_tridiagonal_eigenvalues(t.d.data(), t.e.data(), n, n, got.data());
    for (int r = 0; r < n; ++r) EXPECT_NEAR(got[r], want[r], 8e-16 * n * norm) << "eigenvalue " << r;
    for (int r = 0; r + 1 < n; ++r) EXPECT_GE(got[r], got[r + 1] - 4e-16 * norm) << "order at " << r;
  }
}

// The plain rule the Newton finish must match: bisection on counts of negative pivots of the
// LDL^T factorisation of T - x I (LAPACK dstebz's form, independent of the kernel's minors), in
// long double, down to a bracket of 2^-56 |T|.
double plain_bisection(const Tri& t, int r, double norm) {
  const int n = static_cast<int>(t.d.size());
  const auto count_below = [&](long double x) {
    int count = 0;
    long double q = 1.0L;
    for (int i = 0; i < n; ++i) {
      const long double e2 = i > 0 ? static_cast<long double>(t.e[i - 1]) * t.e[i - 1] : 0.0L;
      q = (t.d[i] - x) - (i > 0 ? e2 / q : 0.0L);
      if (std::fabs(q) < 1e-300L) q = -1e-300L;
      if (q < 0) ++count;
    }
    return count;
  };
  long double lo = -norm, hi = norm;
  const int target = n - 1 - r;  // ascending index of the r-th largest
  while (hi - lo > std::ldexp(norm, -56)) {
    const long double mid = (lo + hi) / 2;
    (count_below(mid) <= target ? lo : hi) = mid;
  }
  return static_cast<double>((lo + hi) / 2);
}

double gershgorin(const Tri& t) {
  const int n = static_cast<int>(t.d.size());
  double norm = 0.0;
  for (int i = 0; i < n; ++i) {
    norm = std::max(norm,
                    std::fabs(t.d[i]) + (i > 0 ? std::fabs(t.e[i - 1]) : 0.0) + (i + 1 < n ? std::fabs(t.e[i]) : 0.0));
  }
  return norm;
}

TEST(TridiagonalBisection, NewtonFinishIsAsPreciseAsPlainBisection) {
  std::vector<std::pair<std::string, Tri>> cases = tridiagonals();
  std::mt19937 rng(33);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int c = 0; c < 60; ++c) {  // graded, like a value Gram's tridiagonal form: a decaying continuum
    const double decay = 3.0 + c % 20;
    Tri t;
    for (int i = 0; i < 64; ++i) t.d.push_back(std::exp(-i / decay) * (1.0 + 0.3 * normal(rng)));
    for (int i = 0; i < 63; ++i) t.e.push_back(0.2 * std::exp(-i / decay) * normal(rng));
    cases.emplace_back("graded " + std::to_string(c), t);
  }
  for (const auto& [name, t] : cases) {
    SCOPED_TRACE(name);
    const int n = static_cast<int>(t.d.size());
    const double norm = gershgorin(t);
    const int k = std::min(n, 16);
    std::vector<double> got(static_cast<std::size_t>(k));
    top_tridiagonal_eigenvalues(t.d.data(), t.e.data(), n, k, got.data());
    for (int r = 0; r < k; ++r) EXPECT_NEAR(got[r], plain_bisection(t, r, norm), 0x1p-50 * norm) << "eigenvalue " << r;
  }
}

// A dim x dim value Gram matrix sum_j w_j^2 v_j v_j^T with column scales `scale(i)`.
template <class Scale>
std::vector<double> value_gram(int rows, int dim, uint32_t seed, Scale scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(static_cast<std::size_t>(dim * dim), 0.0), v(static_cast<std::size_t>(dim));
  for (int j = 0; j < rows; ++j) {
    const double w = std::exp(normal(rng)) / rows;
    for (int i = 0; i < dim; ++i) v[i] = w * normal(rng) * scale(i);
    for (int r = 0; r < dim; ++r)
      for (int c = 0; c < dim; ++c) g[r * dim + c] += v[r] * v[c];
  }
  return g;
}

TEST(TridiagonalBisection, TopEigenpairsMatchTheFullSolversProjector) {
  constexpr int kDim = 64, kTop = 16;
  std::vector<std::pair<std::string, std::vector<double>>> grams;
  grams.emplace_back("peaked", value_gram(512, kDim, 1, [](int i) { return std::exp(-i / 6.0); }));
  grams.emplace_back("flat", value_gram(512, kDim, 2, [](int) { return 1.0; }));
  grams.emplace_back("continuum", value_gram(512, kDim, 3, [](int i) { return std::exp(-i / 12.0); }));
  grams.emplace_back("rank 40", value_gram(40, kDim, 4, [](int i) { return std::exp(-i / 12.0); }));
  grams.emplace_back("rank 17", value_gram(17, kDim, 5, [](int) { return 1.0; }));
  // Rank 10: the top 16 end in six numerically zero eigenvalues (a cluster that never isolates).
  grams.emplace_back("rank 10", value_gram(10, kDim, 6, [](int i) { return std::exp(-i / 12.0); }));
  {  // eigenvalues 1, ..., a cluster 0.01 (1 +- 1e-9 t) around positions 12..20, a tail below
    const auto base = grams[1].second;
    std::vector<double> ev, q;
    symmetric_eigen_descending(base, kDim, ev, q);
    std::vector<double> a(static_cast<std::size_t>(kDim * kDim), 0.0);
    for (int t = 0; t < kDim; ++t) {
      const double lambda = t < 12 ? 1.0 / (1 + t) : t < 21 ? 0.01 * (1.0 + 1e-9 * (16 - t)) : 1e-4 / (1 + t);
      for (int i = 0; i < kDim; ++i)
        for (int j = 0; j < kDim; ++j) a[i * kDim + j] += lambda * q[t * kDim + i] * q[t * kDim + j];
    }
    grams.emplace_back("cluster at 16", a);
  }
  for (const auto& [name, g] : grams) {
    SCOPED_TRACE(name);
    std::vector<double> values, vectors, all, all_vectors;
    top_symmetric_eigenvectors(g, kDim, kTop, values, vectors);
    symmetric_eigen_descending(g, kDim, all, all_vectors);
    ASSERT_EQ(values.size(), static_cast<std::size_t>(kTop));
    for (int t = 0; t < kTop; ++t) {
      EXPECT_NEAR(values[t], all[t], 1e-14 * all[0]) << "eigenvalue " << t;
      double worst = 0.0;
      for (int i = 0; i < kDim; ++i) {
        double au = 0.0;
        for (int j = 0; j < kDim; ++j) au += g[i * kDim + j] * vectors[t * kDim + j];
        worst = std::max(worst, std::fabs(au - values[t] * vectors[t * kDim + i]));
      }
      EXPECT_LE(worst, 1e-13 * all[0]) << "residual of vector " << t;
    }
    // The projectors onto the top 16: equal up to rounding over the gap at the boundary (the
    // cluster's 16th and 17th differ by 1e-11 of lambda_1: there the subspace itself is that loose).
    const double gap = std::max(all[kTop - 1] - all[kTop], 1e-300);
    double worst = 0.0;
    for (int i = 0; i < kDim; ++i) {
      for (int j = 0; j < kDim; ++j) {
        double p = 0.0, want = 0.0;
        for (int t = 0; t < kTop; ++t) {
          p += vectors[t * kDim + i] * vectors[t * kDim + j];
          want += all_vectors[t * kDim + i] * all_vectors[t * kDim + j];
        }
        worst = std::max(worst, std::fabs(p - want));
      }
    }
    EXPECT_LE(worst, 1e-13 * all[0] / gap) << "gap " << gap / all[0] << " of lambda_1";
  }
}

}  // namespace
}  // namespace veloxquant::eviction
