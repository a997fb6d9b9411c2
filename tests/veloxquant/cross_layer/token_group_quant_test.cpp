// XQuant's token-axis group quantization (spec §4.3) against values computed by hand.
#include <gtest/gtest.h>

#include <vector>

#include "veloxquant/cross_layer/token_group_quant.h"

namespace veloxquant::cross_layer {
namespace {

TEST(TokenGroupQuant, TwoBitsHandComputed) {
  // Two channels, 4 tokens, one group of 4, b = 2 (levels 3).
  // ch0: [1, -2, 0.5, 4]: min -2, scale 6/3 = 2; (x - min)/scale = 1.5, 0, 1.25, 3
  //      -> round half to even 2, 0, 1, 3 -> x_hat 2, -2, 0, 4.
  // ch1: [-1, 0, 1.5, 2]: min -1, scale 1; 0, 1, 2.5, 3 -> 0, 1, 2, 3 -> -1, 0, 1, 2.
  const std::vector<float> x = {1, -1, -2, 0, 0.5f, 1.5f, 4, 2};
  std::vector<uint8_t> codes(8);
  std::vector<TokenGroupParams> params(2);
  quantize_token_groups(x.data(), 4, 2, 4, 2, codes.data(), params.data());
  EXPECT_EQ(codes, (std::vector<uint8_t>{2, 0, 0, 1, 1, 2, 3, 3}));
  EXPECT_FLOAT_EQ(params[0].scale, 2.0f);
  EXPECT_FLOAT_EQ(params[0].min, -2.0f);
  EXPECT_FLOAT_EQ(params[1].scale, 1.0f);
  EXPECT_FLOAT_EQ(params[1].min, -1.0f);
  std::vector<float> back(8);
  dequantize_token_groups(codes.data(), 4, 2, 4, params.data(), back.data());
  EXPECT_EQ(back, (std::vector<float>{2, -1, -2, 0, 0, 1, 4, 2}));
}

TEST(TokenGroupQuant, ShortLastGroupAsPaddingByTheLastRowAndConstantGroups) {
  // One channel, 5 tokens, group 4: [0, 1, 2, 3 | 7]. Padding the last group by repeating 7
  // gives min = max = 7: scale = 1e-8 (the floor), code 0, x_hat = 7 exactly.
  const std::vector<float> x = {0, 1, 2, 3, 7};
  std::vector<uint8_t> codes(5);
  std::vector<TokenGroupParams> params(2);
  ASSERT_EQ(token_group_count(5, 4), 2);
  quantize_token_groups(x.data(), 5, 1, 4, 2, codes.data(), params.data());
  EXPECT_EQ(codes, (std::vector<uint8_t>{0, 1, 2, 3, 0}));
  EXPECT_FLOAT_EQ(params[1].scale, 1e-8f);
  EXPECT_FLOAT_EQ(params[1].min, 7.0f);
  std::vector<float> back(5);
  dequantize_token_groups(codes.data(), 5, 1, 4, params.data(), back.data());
  EXPECT_EQ(back, x);
}

TEST(TokenGroupQuant, OneBitRoundsHalfToEven) {
  // [0, 0.5, 1]: levels 1, scale 1; 0.5 rounds to 0 (half to even), so x_hat = 0, 0, 1.
  const std::vector<float> x = {0, 0.5f, 1};
  std::vector<uint8_t> codes(3);
  std::vector<TokenGroupParams> params(1);
  quantize_token_groups(x.data(), 3, 1, 32, 1, codes.data(), params.data());
  EXPECT_EQ(codes, (std::vector<uint8_t>{0, 0, 1}));
}

TEST(TokenGroupQuant, ReuseFitsOwnParamsOntoForeignCodes) {
  // The reuse layer's data [0, 1, 2, 3] gets its own (scale 1, min 0) and reads the anchor's
  // codes [2, 0, 1, 3] (from the first test's channel 0): x_hat = 2, 0, 1, 3 — residual
  // 2, -1, -1, 0 is what xquant_residual_bits must carry (issue #380 of the original).
  const std::vector<float> mine = {0, 1, 2, 3};
  std::vector<TokenGroupParams> params(1);
  fit_token_group_params(mine.data(), 4, 1, 4, 2, params.data());
  EXPECT_FLOAT_EQ(params[0].scale, 1.0f);
  EXPECT_FLOAT_EQ(params[0].min, 0.0f);
  const std::vector<uint8_t> anchor_codes = {2, 0, 1, 3};
  std::vector<float> back(4);
  dequantize_token_groups(anchor_codes.data(), 4, 1, 4, params.data(), back.data());
  EXPECT_EQ(back, (std::vector<float>{2, 0, 1, 3}));
}

}  // namespace
}  // namespace veloxquant::cross_layer
