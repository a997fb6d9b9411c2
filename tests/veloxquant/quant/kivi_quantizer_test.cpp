// KIVI group quantization (spec §11.9): hand-computed codes, fp16 parameters, per-token and
// per-channel layouts, int8 per token, and the exact bytes (b + 1 bpe at group 32).
#include <gtest/gtest.h>

#include <cmath>

#include "base/half.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/kivi.h"
#include "veloxquant/quant/quant_eval.h"

namespace vc = veloxquant::core;
namespace vq = veloxquant::quant;

TEST(GroupQuant, HandComputedGroupWithHalfEvenRounding) {
  // min 0, max 3, b = 2: levels 3, scale 1. 0.5 -> 0 and 2.5 -> 2 (half to even), 1.5 -> 2.
  const float x[] = {0.0f, 0.5f, 1.5f, 2.5f, 3.0f};
  uint8_t codes[5];
  const auto p = vc::quantize_group(x, 5, 1, 2, codes);
  EXPECT_EQ(base::f16_to_f32(p.scale_f16), 1.0f);
  EXPECT_EQ(base::f16_to_f32(p.min_f16), 0.0f);
  const uint8_t expect[] = {0, 0, 2, 2, 3};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(codes[i], expect[i]) << i;
  float out[5];
  vc::dequantize_group(codes, 5, 1, p, out);
  EXPECT_EQ(out[4], 3.0f);
  EXPECT_EQ(out[2], 2.0f);
}

TEST(GroupQuant, ConstantGroupReconstructsExactly) {
  const float x[] = {0.25f, 0.25f, 0.25f};
  uint8_t codes[3];
  const auto p = vc::quantize_group(x, 3, 1, 4, codes);
  float out[3];
  vc::dequantize_group(codes, 3, 1, p, out);
  for (float v : out) EXPECT_EQ(v, 0.25f);
}

TEST(GroupQuant, ErrorIsWithinHalfAStep) {
  vq::UnitPairs pairs = vq::draw_unit_pairs(64, 40, 3);
  for (int bits = 2; bits <= 8; bits += 2) {
    std::vector<uint8_t> codes(pairs.x.size());
    std::vector<vc::GroupParams> tok(std::size_t{40} * 2), chan(std::size_t{2} * 64);
    std::vector<float> out(pairs.x.size()), out2(pairs.x.size());
    vc::quantize_per_token(pairs.x.data(), 40, 64, bits, 32, codes.data(), tok.data());
    vc::dequantize_per_token(codes.data(), 40, 64, 32, tok.data(), out.data());
    for (std::size_t r = 0; r < 40; ++r)
      for (std::size_t c = 0; c < 64; ++c) {
        const float step = base::f16_to_f32(tok[r * 2 + c / 32].scale_f16);
        ASSERT_LE(std::abs(out[r * 64 + c] - pairs.x[r * 64 + c]), 0.5f * step + 1e-3f * step + 1e-6f);
      }
    // Per channel: groups of 32 tokens along each of the 64 channels (40 tokens: 32 + 8).
    vc::quantize_per_channel(pairs.x.data(), 40, 64, bits, 32, codes.data(), chan.data());
    vc::dequantize_per_channel(codes.data(), 40, 64, 32, chan.data(), out2.data());
    for (std::size_t t = 0; t < 40; ++t)
      for (std::size_t c = 0; c < 64; ++c) {
        const float step = base::f16_to_f32(chan[(t / 32) * 64 + c].scale_f16);
        ASSERT_LE(std::abs(out2[t * 64 + c] - pairs.x[t * 64 + c]), 0.5f * step + 1e-3f * step + 1e-6f);
      }
  }
  EXPECT_EQ(vc::groups_per_row(40, 32), 2u);
  EXPECT_THROW(vc::groups_per_row(40, 0), veloxquant::QuantizerConfigError);
}

TEST(Int8PerToken, HandComputed) {
  // max|v| = 127 -> scale exactly 1; codes are v rounded half to even, clipped to +-127.
  const float v[] = {127.0f, -63.5f, 2.5f, 0.0f, -127.0f};
  int8_t codes[5];
  const uint16_t scale = vc::quantize_int8_row(v, 5, codes);
  EXPECT_EQ(base::f16_to_f32(scale), 1.0f);
  const int8_t expect[] = {127, -64, 2, 0, -127};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(codes[i], expect[i]);
  float out[5];
  vc::dequantize_int8_row(codes, 5, scale, out);
  EXPECT_EQ(out[1], -64.0f);
  const float zeros[3] = {0, 0, 0};
  int8_t zc[3];
  const uint16_t zs = vc::quantize_int8_row(zeros, 3, zc);
  EXPECT_GT(base::f16_to_f32(zs), 0.0f);  // the 1e-8 floor survives as fp16's smallest step
}

TEST(KiviQuantizer, BytesAreBPlusOneBitsPerElementAndScoreMatchesDecode) {
  vq::Kivi q2(128, 2, 0);
  EXPECT_EQ(q2.code_bytes(), 48u);                   // 3.0 bpe: KIVI-2
  EXPECT_EQ(vq::Kivi(128, 4, 0).code_bytes(), 80u);  // 5.0 bpe: KIVI-4
  const auto pairs = vq::draw_unit_pairs(128, 25, 1);
  std::vector<uint8_t> codes(25 * q2.code_bytes());
  q2.encode(pairs.x.data(), 25, codes.data());
  std::vector<float> dec(std::size_t{25} * 128);
  q2.decode(codes.data(), 25, dec.data());
  for (int i = 0; i < 25; ++i) {
    float s;
    q2.score(q2.prepare_query(&pairs.y[static_cast<std::size_t>(i) * 128]), &codes[i * q2.code_bytes()], 1, &s);
    double dot = 0;
    for (int j = 0; j < 128; ++j) dot += static_cast<double>(pairs.y[i * 128 + j]) * dec[i * 128 + j];
    EXPECT_NEAR(s, dot, 2e-5);
  }
  EXPECT_THROW(vq::Kivi(128, 2, 0, 0), veloxquant::QuantizerConfigError);
}
