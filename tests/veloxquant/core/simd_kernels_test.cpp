// Every SIMD kernel against its scalar reference, on lengths that exercise the vector body
// and the scalar tail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "veloxquant/core/rng.h"
#include "veloxquant/core/simd_kernels.h"

namespace vc = veloxquant::core;

namespace {
std::vector<float> normals(size_t n, uint64_t seed) {
  vc::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}
const size_t kLengths[] = {0, 1, 3, 8, 15, 16, 17, 64, 127, 128, 1000};
}  // namespace

TEST(SimdKernels, ReportsATarget) { EXPECT_STRNE(vc::simd::target_name(), ""); }

TEST(SimdKernels, DotMatchesScalarUpToReassociation) {
  for (size_t n : kLengths) {
    auto a = normals(n, 1), b = normals(n, 2);
    double exact = 0.0, abs_sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      exact += static_cast<double>(a[i]) * b[i];
      abs_sum += std::abs(static_cast<double>(a[i]) * b[i]);
    }
    // Both float sums are within n * eps * sum|a_i b_i| of the exact value.
    const double tol = 2.0 * (n + 1) * 6e-8 * abs_sum + 1e-7;
    EXPECT_NEAR(vc::simd::dot(a.data(), b.data(), n), exact, tol) << n;
    EXPECT_NEAR(vc::scalar::dot(a.data(), b.data(), n), exact, tol) << n;
  }
}

TEST(SimdKernels, ElementwiseKernelsAreExact) {
  for (size_t n : kLengths) {
    auto a = normals(n, 3), b = normals(n, 4);
    auto a1 = a, b1 = b, a2 = a, b2 = b;
    vc::simd::butterfly(a1.data(), b1.data(), n);
    vc::scalar::butterfly(a2.data(), b2.data(), n);
    EXPECT_EQ(a1, a2);
    EXPECT_EQ(b1, b2);
    auto s1 = a, s2 = a;
    vc::simd::scale(s1.data(), 0.37f, n);
    vc::scalar::scale(s2.data(), 0.37f, n);
    EXPECT_EQ(s1, s2);
    std::vector<float> m1(n), m2(n);
    vc::simd::multiply(a.data(), b.data(), m1.data(), n);
    vc::scalar::multiply(a.data(), b.data(), m2.data(), n);
    EXPECT_EQ(m1, m2);
  }
}

TEST(SimdKernels, LutSumMatchesScalar) {
  vc::Rng rng(5);
  for (size_t n : kLengths) {
    auto lut = normals(n * 256 + 1, 6);
    std::vector<uint8_t> bytes(n);
    for (auto& v : bytes) v = static_cast<uint8_t>(rng.below(256));
    double exact = 0.0, abs_sum = 0.0;
    for (size_t p = 0; p < n; ++p) {
      exact += lut[p * 256 + bytes[p]];
      abs_sum += std::abs(lut[p * 256 + bytes[p]]);
    }
    const double tol = 2.0 * (n + 1) * 6e-8 * abs_sum + 1e-7;
    EXPECT_NEAR(vc::simd::lut_sum(lut.data(), bytes.data(), n), exact, tol) << n;
    EXPECT_NEAR(vc::scalar::lut_sum(lut.data(), bytes.data(), n), exact, tol) << n;
  }
}

TEST(SimdKernels, CountBelowMatchesScalarIncludingTies) {
  for (size_t nb : {1u, 3u, 15u, 31u, 63u, 255u}) {
    auto boundaries = normals(nb, 7);
    std::sort(boundaries.begin(), boundaries.end());
    for (size_t n : kLengths) {
      auto x = normals(n, 8 + n);
      for (size_t i = 0; i < n && i < nb; i += 2) x[i] = boundaries[i];  // exact ties
      std::vector<uint8_t> a(n), b(n);
      vc::simd::count_below(x.data(), n, boundaries.data(), nb, a.data());
      vc::scalar::count_below(x.data(), n, boundaries.data(), nb, b.data());
      ASSERT_EQ(a, b) << "nb=" << nb << " n=" << n;
    }
  }
}

TEST(SimdKernels, FwhtShortStridesAreExact) {
  for (size_t n : {8, 16, 64, 128, 1024}) {
    auto a = normals(n, 9), b = a;
    vc::simd::fwht_short_strides(a.data(), n);
    vc::scalar::fwht_short_strides(b.data(), n);
    EXPECT_EQ(a, b) << "n=" << n;
    // Each run of 8 is H_8 applied to it: (H_8 x)_i = sum_j (-1)^popcount(i & j) x_j.
    const auto x = normals(n, 9);
    for (size_t i = 0; i < n; ++i) {
      const size_t base = i / 8 * 8;
      double expect = 0.0;
      for (size_t j = 0; j < 8; ++j) {
        expect += (__builtin_popcountll((i - base) & j) & 1 ? -1.0 : 1.0) * x[base + j];
      }
      EXPECT_NEAR(b[i], expect, 1e-5) << "n=" << n << " i=" << i;
    }
  }
}
