// SKVQ's clip-factor search with the candidates in SIMD lanes (caches/skvq_clip_search.h) against
// its scalar reference — the same codes and the same stored (scale, min) bits — on every SIMD
// target this machine runs, for the widths, group lengths and value shapes the encoder meets
// (including constant groups, exact ties between candidates and groups past the SIMD bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/caches/skvq_clip_search.h"
#include "veloxquant/caches/skvq_codes.h"
#include "support/simd_targets.h"

namespace veloxquant::skvq {
namespace {

std::vector<float> group_values(std::mt19937& rng, int n, int shape) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    float v = normal(rng);
    if (shape == 1) v = 3.0f;                                      // constant: every candidate ties
    if (shape == 2 && i % 9 == 0) v *= 40.0f;                      // outliers: clipping pays
    if (shape == 3) v = static_cast<float>(i % 4) * 0.25f - 0.5f;  // few levels, exact reconstructions
    if (shape == 4) v = 1e-9f * v;                                 // scale below f16's normal range
    x[static_cast<std::size_t>(i)] = v;
  }
  return x;
}

// One group of values: every target's search picks the scalar reference's scale, min and codes
// (counted in `checked`).
void check_group(const std::vector<float>& x, int bits, double alpha, int shape, int& checked) {
  const int n = static_cast<int>(x.size());
  std::vector<uint8_t> ref(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
  const GroupParams16 want = scalar::search_clip_group(x.data(), n, bits, alpha, ref.data());
  test_support::for_each_simd_target([&](const char* target) {
    std::fill(got.begin(), got.end(), uint8_t{0xee});
    const GroupParams16 p = search_clip_group(x.data(), n, bits, alpha, got.data());
    ASSERT_EQ(p.scale_f16, want.scale_f16)
        << target << " bits " << bits << " n " << n << " shape " << shape << " alpha " << alpha;
    ASSERT_EQ(p.min_f16, want.min_f16) << target << " bits " << bits << " n " << n;
    ASSERT_EQ(got, ref) << target << " bits " << bits << " n " << n << " shape " << shape;
    ++checked;
  });
}

TEST(SkvqClipSearch, SimdMatchesScalarOnEveryTarget) {
  std::mt19937 rng(11);
  int checked = 0;
  for (const int bits : {1, 2, 3, 4, 8}) {
    for (const int n : {1, 2, 7, 16, 31, 32, 64, kMaxSimdGroup, kMaxSimdGroup + 5}) {
      for (const double alpha : {1.0, 0.8}) {
        for (int shape = 0; shape < 5; ++shape) {
          check_group(group_values(rng, n, shape), bits, alpha, shape, checked);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// The reference itself: the chosen candidate's error is the least of the 11 (ties to the first).
TEST(SkvqClipSearch, ScalarPicksTheLeastError) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> x = group_values(rng, 32, trial % 3 == 0 ? 2 : 0);
    std::vector<uint8_t> codes(32), trial_codes(32);
    const GroupParams16 p = scalar::search_clip_group(x.data(), 32, 2, 1.0, codes.data());
    const double chosen = group_error(x.data(), codes.data(), 32, p);
    for (int k = 0; k < kClipCandidates; ++k) {
      const GroupParams16 q = clip_group(x.data(), 32, 2, clip_candidate(1.0, k), trial_codes.data());
      ASSERT_LE(chosen, group_error(x.data(), trial_codes.data(), 32, q)) << "candidate " << k;
    }
  }
}

}  // namespace
}  // namespace veloxquant::skvq
