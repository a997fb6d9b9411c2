// Inverse iteration for the eigenvectors of a symmetric tridiagonal matrix
// (tridiagonal_inverse_iteration.h), its eigenvalues from bisection:
//   - every SIMD target this machine runs gives the scalar reference's doubles bit for bit, for
//     k = 1, 5, 16, 17 and n vectors (lanes partly filled, several blocks, the last lane alone);
//   - the vectors are eigenvectors: |T x - lambda x| at rounding of |T|, orthonormal to rounding
//     (Wilkinson's close pairs included: there only the orthogonalisation keeps the vectors apart).
//     Two inputs are outside what this fixed-start, two-solve scheme (curdkv's, one eigenvalue at a
//     time or as a block) resolves, and are checked for SIMD = scalar only: an exactly diagonal T with exactly
//     repeated eigenvalues (every vector of the eigenspace is amplified alike, so after the first
//     the rest is rounding noise), and T scaled by 1e-150 (1 / pivot reaches 1e166, whose square
//     overflows the norm). curdkv's value Grams are neither.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "veloxquant/eviction/tridiagonal_bisection.h"
#include "veloxquant/eviction/tridiagonal_inverse_iteration.h"
#include "support/simd_targets.h"
#include "tridiagonal_cases.h"

namespace veloxquant::eviction {
namespace {

using test_cases::Tri;

std::vector<std::pair<std::string, Tri>> tridiagonals() {
  std::mt19937 rng(31);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::pair<std::string, Tri>> out;
  for (int n : {1, 2, 3, 5, 17, 33, 64, 65})
    out.emplace_back("random n " + std::to_string(n), test_cases::random_tridiagonal(n, rng, normal));
  out.emplace_back("split", test_cases::split_in_three(out[6].second));  // random n 64
  out.emplace_back("repeated", test_cases::repeated_diagonal());         // exact zero pivots
  out.emplace_back("wilkinson", test_cases::wilkinson_65());
  {  // graded: a value Gram's tridiagonal form spans many orders of magnitude
    Tri t;
    for (int i = 0; i < 64; ++i) t.d.push_back(std::exp(-0.3 * i) * (1.0 + 0.1 * normal(rng)));
    for (int i = 0; i < 63; ++i) t.e.push_back(0.1 * std::exp(-0.3 * i) * normal(rng));
    out.emplace_back("graded", t);
  }
  for (double scale : {1e-150, 1e150}) {
    out.emplace_back("scaled " + std::to_string(scale), test_cases::scaled(out[6].second, scale));
  }
  return out;
}

std::vector<double> top_eigenvalues(const Tri& t, int64_t k) {
  std::vector<double> lambdas(static_cast<std::size_t>(k));
  scalar::top_tridiagonal_eigenvalues(t.d.data(), t.e.data(), static_cast<int64_t>(t.d.size()), k, lambdas.data());
  return lambdas;
}

TEST(TridiagonalInverseIteration, EverySimdTargetEqualsTheScalarReference) {
  for (const auto& named : tridiagonals()) {
    const std::string& name = named.first;
    const Tri& t = named.second;  // a plain reference: the lambda below captures it
    const int64_t n = static_cast<int64_t>(t.d.size());
    for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}, n}) {
      if (k > n) continue;
      SCOPED_TRACE(name + " k " + std::to_string(k));
      const std::vector<double> lambdas = top_eigenvalues(t, k);
      std::vector<double> want(static_cast<std::size_t>(k * n));
      scalar::tridiagonal_inverse_iteration(t.d.data(), t.e.data(), n, lambdas.data(), k, want.data());
      test_support::for_each_simd_target([&](const char* target) {
        std::vector<double> got(static_cast<std::size_t>(k * n), -7.0);
        tridiagonal_inverse_iteration(t.d.data(), t.e.data(), n, lambdas.data(), k, got.data());
        int64_t differing = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
          differing += std::bit_cast<uint64_t>(got[i]) != std::bit_cast<uint64_t>(want[i]);
        EXPECT_EQ(differing, 0) << target << ": entries differing from the scalar reference";
      });
    }
  }
}

TEST(TridiagonalInverseIteration, VectorsAreOrthonormalEigenvectors) {
  for (const auto& [name, t] : tridiagonals()) {
    if (name == "repeated" || name.rfind("scaled 0", 0) == 0) continue;  // see the file's comment
    const int64_t n = static_cast<int64_t>(t.d.size());
    const int64_t k = std::min<int64_t>(n, 17);
    SCOPED_TRACE(name);
    double norm = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      norm = std::max(
          norm, std::fabs(t.d[i]) + (i > 0 ? std::fabs(t.e[i - 1]) : 0.0) + (i + 1 < n ? std::fabs(t.e[i]) : 0.0));
    }
    const std::vector<double> lambdas = top_eigenvalues(t, k);
    std::vector<double> x(static_cast<std::size_t>(k * n));
    tridiagonal_inverse_iteration(t.d.data(), t.e.data(), n, lambdas.data(), k, x.data());
    for (int64_t r = 0; r < k; ++r) {
      const double* v = x.data() + r * n;
      double worst = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        double tv = t.d[i] * v[i];
        if (i > 0) tv += t.e[i - 1] * v[i - 1];
        if (i + 1 < n) tv += t.e[i] * v[i + 1];
        worst = std::max(worst, std::fabs(tv - lambdas[r] * v[i]));
      }
      EXPECT_LE(worst, 1e-14 * norm) << "residual of vector " << r;
      for (int64_t s = 0; s <= r; ++s) {
        double dot = 0.0;
        for (int64_t i = 0; i < n; ++i) dot += v[i] * x[s * n + i];
        EXPECT_NEAR(dot, s == r ? 1.0 : 0.0, 1e-13) << "vectors " << r << " and " << s;
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::eviction
