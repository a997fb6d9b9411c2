// The RVQ stage-2 codebook scale. The original sizes the Laplacian from sqrt(3 pi)/2 * 4^-b,
// the Panter-Dite MSE of a b-bit Gaussian quantizer, used as if it were a standard deviation;
// "matched" (our default) sizes it to the real variance of the stage-1 residual. The numbers
// here come from Max's table (anchors.md §1.5), not from the code under test.
#include <gtest/gtest.h>

#include <cmath>

#include "veloxquant/caches/turboquant_rvq_cache.h"
#include "veloxquant/core/lloyd_max.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/quant_eval.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace vq = veloxquant::quant;
namespace vc = veloxquant::core;

namespace {

// Max (1960), Gaussian Lloyd-Max distortion per unit variance, b = 1..4.
constexpr double kMaxDistortion[] = {0.3634, 0.1175, 0.03455, 0.00950};

TEST(RvqStage2Scale, MatchedScaleIsTheStage1ResidualVariance) {
  for (int b = 1; b <= 4; ++b) {
    // d = 128 uses the Gaussian N(0, 1/128) stage 1: residual variance D_b / 128, and a
    // Laplacian of scale s has variance 2 s^2.
    const double expected = std::sqrt(kMaxDistortion[b - 1] / 128.0 / 2.0);
    EXPECT_NEAR(vc::rvq_matched_laplacian_scale(128, b), expected, 2e-3 * expected) << "b=" << b;
    // The original's scale is always the narrower one.
    EXPECT_LT(vc::rvq_laplacian_scale(128, b), vc::rvq_matched_laplacian_scale(128, b)) << "b=" << b;
  }
}

TEST(RvqStage2Scale, MatchedCodebookLowersDistortionAtEveryWidth) {
  for (int b = 1; b <= 4; ++b) {
    const vq::TurboQuantRvq matched(128, b, 7, vq::RvqStage2Scale::kMatched);
    const vq::TurboQuantRvq original(128, b, 7, vq::RvqStage2Scale::kOriginal);
    const double mse_matched = vq::evaluate_quantizer(matched, 3000, 11).mse;
    const double mse_original = vq::evaluate_quantizer(original, 3000, 11).mse;
    EXPECT_LT(mse_matched, mse_original) << "b=" << b;
    // Two b-bit stages can at best reach about D_b^2 (two Lloyd-Max stages on a matched
    // residual); the matched codebook must land within 3x of that, the original stays far off
    // once b >= 2 (its stage 2 mostly clips).
    const double two_stage_floor = kMaxDistortion[b - 1] * kMaxDistortion[b - 1];
    EXPECT_LT(mse_matched, 3.0 * two_stage_floor) << "b=" << b;
    if (b >= 2) {
      EXPECT_GT(mse_original, 3.0 * two_stage_floor) << "b=" << b;
    }
  }
}

TEST(RvqStage2Scale, NamesParseAndBadNamesNameTheValue) {
  EXPECT_EQ(vq::parse_rvq_stage2_scale("matched"), vq::RvqStage2Scale::kMatched);
  EXPECT_EQ(vq::parse_rvq_stage2_scale("original"), vq::RvqStage2Scale::kOriginal);
  try {
    vq::parse_rvq_stage2_scale("wide");
    FAIL() << "expected QuantizerConfigError";
  } catch (const veloxquant::QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'wide'"), std::string::npos) << e.what();
  }
}

TEST(RvqStage2Scale, CacheStateRecordsTheScaleAndOlderStatesMeanOriginal) {
  veloxquant::TurboQuantRvqCache cache(64, 2, 3);
  const std::vector<std::string> meta = cache.meta_state();
  ASSERT_EQ(meta.size(), 7u);
  EXPECT_EQ(meta[6], "matched");

  // Keys whose stage-1 residual is large: the two codebooks decode them differently, so a
  // restored cache must pick the one the state was written with.
  lm::Tensor keys({1, 1, 4, 64}, lm::DType::F32), values({1, 1, 4, 64}, lm::DType::F32);
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t j = 0; j < 64; ++j) keys.set({0, 0, t, j}, std::sin(0.37f * static_cast<float>(j * (t + 1))));
  veloxquant::TurboQuantRvqCache original(64, 2, 3, 0, vq::RvqStage2Scale::kOriginal);
  const std::vector<float> want = original.update_and_fetch(keys, values).keys.to_f32();
  std::vector<std::string> old_meta = original.meta_state();
  ASSERT_EQ(old_meta.size(), 7u);
  EXPECT_EQ(old_meta[6], "original");
  old_meta.resize(6);  // a state written before the option existed

  veloxquant::TurboQuantRvqCache restored(64, 2, 3);
  restored.from_state(original.state(), old_meta);
  lm::Tensor none_k({1, 1, 0, 64}, lm::DType::F32), none_v({1, 1, 0, 64}, lm::DType::F32);
  EXPECT_EQ(restored.update_and_fetch(none_k, none_v).keys.to_f32(), want);

  veloxquant::TurboQuantRvqCache matched(64, 2, 3);
  EXPECT_NE(matched.update_and_fetch(keys, values).keys.to_f32(), want);
}

}  // namespace
