// The 8-bit even-level encoder's batched clip-grid search: its closed-form code against the
// quantizer's nearest level, its SIMD trial errors against the scalar loop (bit for bit), and
// encode_block against the one-candidate-at-a-time search it replaces (same scale, same codes).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/half.h"
#include "support/random_values.h"

#include "veloxquant/quant/block_lloyd_quant.h"
#include "veloxquant/quant/scale_trials.h"
#include "veloxquant/quant/log8_scale.h"
#include "support/simd_targets.h"

namespace veloxquant::quant {
namespace {

TEST(ScaleTrials, ClosedFormCodeIsTheNearestLevel) {
  const BlockLloydQuantizer q8(8);
  ASSERT_TRUE(q8.even_levels());
  std::vector<float> probes = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-9f, -1e-9f, 0.999f,
                               1.0f, -1.0f, 1.5f,   -1.5f,   40.0f, -40.0f};
  for (const float b : q8.boundaries()) {  // every midpoint, exactly and one ulp either side
    probes.push_back(b);
    probes.push_back(std::nextafter(b, 2.0f));
    probes.push_back(std::nextafter(b, -2.0f));
  }
  for (const float v : test_support::normal_values(20000, 5)) probes.push_back(0.6f * v);
  for (const float v : probes) EXPECT_EQ(even_byte_code(v), q8.nearest(v)) << v;
}

TEST(ScaleTrials, SimdErrorsEqualTheScalarLoop) {
  const auto x = test_support::normal_values(std::size_t{32} * 40, 6);
  for (const int n_scales : {1, 3, 8, 14, 15, 16}) {
    for (int block = 0; block < 40; ++block) {
      const float* xb = x.data() + std::ptrdiff_t{32} * block;
      std::vector<float> scales;
      scales.reserve(static_cast<std::size_t>(n_scales));
      for (int t = 0; t < n_scales; ++t) scales.push_back(base::f16_to_f32(base::f32_to_f16(0.01f + 0.003f * t)));
      std::vector<double> got(static_cast<std::size_t>(n_scales)), want = got;
      scalar::even_byte_trial_errors(xb, 32, scales.data(), n_scales, want.data());
      test_support::for_each_simd_target([&](const char* target) {  // 8 lanes on AVX3, 4 on AVX2, ...
        even_byte_trial_errors(xb, 32, scales.data(), n_scales, got.data());
        ASSERT_EQ(got, want) << target << ", " << n_scales << " scales, block " << block;
      });
    }
  }
}

// The search as BlockLloydQuantizer did it before: one candidate at a time (nearest() per value,
// the error summed in order, the first strictly smaller kept), then the least-squares refit.
// scale_code: the stored form of a candidate (f16 bits, or the log8 code with 0 = unusable and
// repeats skipped, as encode_block_log8 does); scale_of: its value.
template <class Code, class Value>
int one_at_a_time(const BlockLloydQuantizer& q, const float* x, int n, uint8_t* codes, Code scale_code, Value scale_of,
                  bool skip_repeats) {
  const std::vector<float>& lv = q.levels();
  float absmax = 0.0f;
  for (int i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  double best = INFINITY;
  int best_scale = 0;
  std::vector<int> tried;
  std::vector<uint8_t> trial(static_cast<std::size_t>(n));
  const auto try_scale = [&](float s) {
    const int h = scale_code(s);
    if (skip_repeats && (h == 0 || std::find(tried.begin(), tried.end(), h) != tried.end())) return;
    tried.push_back(h);
    const float stored = scale_of(h);
    if (!(stored > 0.0f)) return;
    const float inv = 1.0f / stored;
    double err = 0.0;
    for (int i = 0; i < n; ++i) {
      trial[static_cast<std::size_t>(i)] = q.nearest(x[i] * inv);
      const double e = static_cast<double>(x[i]) - static_cast<double>(stored) * lv[trial[static_cast<std::size_t>(i)]];
      err += e * e;
    }
    if (err < best) {
      best = err;
      best_scale = h;
      std::copy(trial.begin(), trial.end(), codes);
    }
  };
  for (const float g :
       {0.40f, 0.45f, 0.50f, 0.55f, 0.60f, 0.65f, 0.70f, 0.75f, 0.80f, 0.85f, 0.90f, 0.95f, 1.00f, 1.05f}) {
    try_scale(absmax / lv.back() * g);
  }
  double xl = 0.0, ll = 0.0;
  for (int i = 0; i < n; ++i) {
    xl += static_cast<double>(x[i]) * lv[codes[i]];
    ll += static_cast<double>(lv[codes[i]]) * lv[codes[i]];
  }
  if (ll > 0.0 && xl > 0.0) try_scale(static_cast<float>(xl / ll));
  return best_scale;
}

TEST(ScaleTrials, LevelTrialErrorsEqualTheScalarLoopOnEveryTarget) {
  const auto x = test_support::normal_values(std::size_t{32} * 20, 8);
  for (int bits = 1; bits <= 4; ++bits) {
    const BlockLloydQuantizer q(bits);
    for (const int n_scales : {1, 5, 8, 14, 15}) {
      for (int block = 0; block < 20; ++block) {
        std::vector<float> scales;
        scales.reserve(static_cast<std::size_t>(n_scales));
        for (int t = 0; t < n_scales; ++t) scales.push_back(base::f16_to_f32(base::f32_to_f16(0.2f + 0.05f * t)));
        std::vector<double> got(static_cast<std::size_t>(n_scales)), want = got;
        scalar::level_trial_errors(x.data() + std::ptrdiff_t{32} * block, 32, scales.data(), n_scales,
                                   q.levels().data(), q.boundaries().data(), bits, want.data());
        test_support::for_each_simd_target([&](const char* target) {
          level_trial_errors(x.data() + std::ptrdiff_t{32} * block, 32, scales.data(), n_scales, q.levels().data(),
                             q.boundaries().data(), bits, got.data());
          ASSERT_EQ(got, want) << target << ", " << bits << " bits, " << n_scales << " scales";
        });
      }
    }
  }
}

// Both encoders (f16 and log8 scales), every width, Lloyd and even levels: the batched search
// chooses the scale and codes the one-at-a-time search chose.
TEST(ScaleTrials, EncodersChooseWhatTheOneAtATimeSearchChose) {
  const auto x = test_support::normal_values(std::size_t{32} * 300, 7);
  const auto f16_code = [](float s) { return static_cast<int>(base::f32_to_f16(std::min(s, 65504.0f))); };
  const auto f16_value = [](int h) { return base::f16_to_f32(static_cast<uint16_t>(h)); };
  const auto log8_code = [](float s) { return static_cast<int>(nearest_log8(s)); };
  const auto log8_value = [](int c) { return log8_scale(static_cast<uint8_t>(c)); };
  for (const int bits : {2, 3, 4, 5, 6, 8}) {
    for (const bool uniform : {false, true}) {
      if (bits == 8 && !uniform) continue;  // 8 bits are always even
      const BlockLloydQuantizer q(
          bits, 32, uniform ? BlockLloydQuantizer::Levels::kUniform : BlockLloydQuantizer::Levels::kLloyd);
      for (int block = 0; block < 300; ++block) {
        std::vector<float> xb(x.begin() + std::ptrdiff_t{32} * block, x.begin() + std::ptrdiff_t{32} * (block + 1));
        if (block % 5 == 1) xb[block % 32] *= 9.0f;  // an outlier
        if (block % 5 == 2)
          for (float& v : xb) v *= 1e-4f;  // small magnitudes
        if (block % 5 == 3)
          for (float& v : xb) v = std::round(v * 4) / 4;  // ties on the grid
        std::array<uint8_t, 32> got{}, want{};
        const int s_got = q.encode_block(xb.data(), 32, got.data());
        const int s_want = one_at_a_time(q, xb.data(), 32, want.data(), f16_code, f16_value, false);
        ASSERT_EQ(s_got, s_want) << bits << " bits, block " << block;
        ASSERT_EQ(got, want) << bits << " bits, block " << block;
        if (bits > 6) continue;  // log8 scales: the split keys and q3's values (up to 6 bits)
        const int l_got = q.encode_block_log8(xb.data(), 32, got.data());
        const int l_want = one_at_a_time(q, xb.data(), 32, want.data(), log8_code, log8_value, true);
        ASSERT_EQ(l_got, l_want) << bits << " bits, log8, block " << block;
        if (l_got != 0) {
          ASSERT_EQ(got, want) << bits << " bits, log8, block " << block;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::quant
