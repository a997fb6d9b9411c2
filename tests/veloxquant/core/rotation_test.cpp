// Rotations must be orthonormal (Pi Pi^T = I), invertible, and preserve inner products
// (anchors §1.5 item 7); the Hadamard factors must be Hadamard matrices.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "veloxquant/core/hadamard.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/core/rotation.h"

namespace vc = veloxquant::core;

TEST(HadamardFactor, IsHadamardForEverySupportedOrder) {
  for (int m : {1, 12, 20, 28}) {
    const auto& h = vc::hadamard_factor(m);
    ASSERT_EQ(h.size(), static_cast<size_t>(m * m));
    for (int v : h) ASSERT_TRUE(v == 1 || v == -1) << "m=" << m;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        int dot = 0;
        for (int k = 0; k < m; ++k) dot += h[i * m + k] * h[j * m + k];
        ASSERT_EQ(dot, i == j ? m : 0) << "m=" << m << " rows " << i << "," << j;
      }
  }
  EXPECT_THROW(vc::hadamard_factor(4), base::InvalidArgument);
}

TEST(HadamardFactor, DimensionRuleOfTheOriginal) {
  EXPECT_EQ(vc::hadamard_factor_of(128), 1);
  EXPECT_EQ(vc::hadamard_factor_of(1), 1);
  EXPECT_EQ(vc::hadamard_factor_of(96), 12);
  EXPECT_EQ(vc::hadamard_factor_of(24), 12);
  EXPECT_EQ(vc::hadamard_factor_of(80), 20);
  EXPECT_EQ(vc::hadamard_factor_of(112), 28);
  EXPECT_EQ(vc::hadamard_factor_of(12), 0);  // bare factors excluded
  EXPECT_EQ(vc::hadamard_factor_of(20), 0);
  EXPECT_EQ(vc::hadamard_factor_of(28), 0);
  EXPECT_EQ(vc::hadamard_factor_of(100), 0);
  EXPECT_EQ(vc::hadamard_factor_of(0), 0);
}

TEST(Fwht, MatchesSylvesterMatrixAndScalarReference) {
  // Sylvester: H[i][j] = (-1)^popcount(i & j), an independent definition of the transform.
  for (size_t n : {1u, 2u, 8u, 16u, 64u, 256u}) {
    vc::Rng rng(n);
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(rng.normal());
    std::vector<float> fast = x, ref = x;
    vc::fwht(fast.data(), n);
    vc::fwht_reference(ref.data(), n);
    for (size_t i = 0; i < n; ++i) {
      double expect = 0.0;
      for (size_t j = 0; j < n; ++j) expect += (__builtin_popcountll(i & j) & 1 ? -1.0 : 1.0) * x[j];
      EXPECT_NEAR(fast[i], expect, 1e-4) << "n=" << n << " i=" << i;
      EXPECT_EQ(fast[i], ref[i]) << "SIMD butterflies must equal the scalar reference exactly";
    }
  }
}

class RotationOrthonormal : public ::testing::TestWithParam<int> {};

TEST_P(RotationOrthonormal, PiPiTransposeIsIdentityAndInverseUndoesForward) {
  const int d = GetParam();
  vc::Rotation rot(d, 42);
  EXPECT_EQ(rot.kind() == vc::RotationKind::kHadamard, vc::hadamard_factor_of(d) != 0);
  const auto m = rot.matrix();
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += static_cast<double>(m[i * d + k]) * m[j * d + k];
      ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 2e-5) << "d=" << d << " rows " << i << "," << j;
    }
  vc::Rng rng(5);
  std::vector<float> x(d), q(d), y(d), back(d), qy(d);
  for (int t = 0; t < 20; ++t) {
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : q) v = static_cast<float>(rng.normal());
    rot.forward(x.data(), y.data());
    rot.inverse(y.data(), back.data());
    for (int i = 0; i < d; ++i) ASSERT_NEAR(back[i], x[i], 1e-4);
    // Inner products survive the rotation: <Pi q, Pi x> = <q, x>.
    rot.forward(q.data(), qy.data());
    double a = 0, b = 0;
    for (int i = 0; i < d; ++i) {
      a += static_cast<double>(q[i]) * x[i];
      b += static_cast<double>(qy[i]) * y[i];
    }
    ASSERT_NEAR(a, b, 1e-4 * d);
    // In place gives the same result.
    std::vector<float> inplace = x;
    rot.forward(inplace.data(), inplace.data());
    for (int i = 0; i < d; ++i) ASSERT_EQ(inplace[i], y[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, RotationOrthonormal, ::testing::Values(2, 16, 24, 64, 80, 96, 112, 128, 30, 100));

TEST(Rotation, SeedDeterminesTheRotation) {
  vc::Rotation a(128, 1), b(128, 1), c(128, 2);
  EXPECT_EQ(a.matrix(), b.matrix());
  EXPECT_NE(a.matrix(), c.matrix());
  vc::Rotation h1(50, 1), h2(50, 1), h3(50, 2);
  EXPECT_EQ(h1.matrix(), h2.matrix());
  EXPECT_NE(h1.matrix(), h3.matrix());
}

TEST(Rotation, HaarCanBeForcedAndBadDimensionsThrow) {
  vc::Rotation haar(128, 3, vc::RotationKind::kHaar);
  EXPECT_EQ(haar.kind(), vc::RotationKind::kHaar);
  EXPECT_THROW(vc::Rotation(100, 1, vc::RotationKind::kHadamard), base::InvalidArgument);
  EXPECT_THROW(vc::Rotation(0, 1), base::InvalidArgument);
  try {
    const vc::Rotation rotation(-3, 1);
    FAIL();
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("-3"), std::string::npos);
  }
}
