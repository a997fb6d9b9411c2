// The generator must give the same stream on every platform: checked against the published
// test vectors of SplitMix64 and xoshiro256**, then the derived draws statistically.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "veloxquant/core/rng.h"

namespace vc = veloxquant::core;

TEST(SplitMix64, MatchesPublishedVectorsForSeed1234567) {
  // Vigna's splitmix64.c, seed 1234567 (also the Rosetta Code task "Splitmix64").
  vc::SplitMix64 g(1234567);
  EXPECT_EQ(g.next(), 6457827717110365317ULL);
  EXPECT_EQ(g.next(), 3203168211198807973ULL);
  EXPECT_EQ(g.next(), 9817491932198370423ULL);
  EXPECT_EQ(g.next(), 4593380528125082431ULL);
  EXPECT_EQ(g.next(), 16408922859458223821ULL);
}

TEST(Xoshiro256StarStar, MatchesPublishedVectorsForState1234) {
  // The reference xoshiro256starstar.c from state {1, 2, 3, 4} (the vectors the Rust
  // rand_xoshiro crate pins in its tests).
  auto g = vc::Rng::from_state(1, 2, 3, 4);
  EXPECT_EQ(g.next(), 11520ULL);
  EXPECT_EQ(g.next(), 0ULL);
  EXPECT_EQ(g.next(), 1509978240ULL);
  EXPECT_EQ(g.next(), 1215971899390074240ULL);
  EXPECT_EQ(g.next(), 1216172134540287360ULL);
  EXPECT_EQ(g.next(), 607988272756665600ULL);
}

TEST(Rng, SameSeedSameStreamDifferentSeedDifferentStream) {
  vc::Rng a(42), b(42), c(43);
  int equal_to_c = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    equal_to_c += x == c.next();
  }
  EXPECT_EQ(equal_to_c, 0);
}

TEST(Rng, UniformIsInUnitIntervalWithMeanOneHalf) {
  vc::Rng g(7);
  const int n = 200000;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  // sd of the mean is sqrt(1/12/n) = 6.5e-4; 4 sd.
  EXPECT_NEAR(sum / n, 0.5, 4 * std::sqrt(1.0 / 12.0 / n));
}

TEST(Rng, NormalHasStandardMoments) {
  vc::Rng g(11);
  const int n = 400000;
  double s1 = 0, s2 = 0, s4 = 0;
  int beyond_two = 0;
  for (int i = 0; i < n; ++i) {
    const double z = g.normal();
    s1 += z;
    s2 += z * z;
    s4 += z * z * z * z;
    beyond_two += std::abs(z) > 2.0;
  }
  EXPECT_NEAR(s1 / n, 0.0, 4.0 / std::sqrt(n));         // sd of mean 1/sqrt(n)
  EXPECT_NEAR(s2 / n, 1.0, 4.0 * std::sqrt(2.0 / n));   // Var(z^2) = 2
  EXPECT_NEAR(s4 / n, 3.0, 4.0 * std::sqrt(96.0 / n));  // Var(z^4) = 105 - 9
  // P(|z| > 2) = 0.0455003 for N(0,1).
  EXPECT_NEAR(static_cast<double>(beyond_two) / n, 0.0455003, 4 * std::sqrt(0.0455 * 0.9545 / n));
}

TEST(Rng, SignAndBelowAreUniform) {
  vc::Rng g(3);
  const int n = 100000;
  int plus = 0;
  std::vector<int> counts(7, 0);
  for (int i = 0; i < n; ++i) {
    plus += g.sign() == 1;
    const uint64_t k = g.below(7);
    ASSERT_LT(k, 7u);
    ++counts[k];
  }
  EXPECT_NEAR(plus, n / 2.0, 4 * std::sqrt(n / 4.0));
  for (int c : counts) EXPECT_NEAR(c, n / 7.0, 4 * std::sqrt(n / 7.0));
}

TEST(Rng, DerivedSeedsAreDistinctPerPurpose) {
  EXPECT_NE(vc::derive_seed(42, 1), vc::derive_seed(42, 2));
  EXPECT_NE(vc::derive_seed(42, 1), vc::derive_seed(43, 1));
  EXPECT_EQ(vc::derive_seed(42, 1), vc::derive_seed(42, 1));
}
