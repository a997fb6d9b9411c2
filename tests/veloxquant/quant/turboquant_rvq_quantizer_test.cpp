// turboquant_rvq: the original's byte accounting, its storage layout, its norm rules, and the
// stream API the RVQ cache builds on.
#include <gtest/gtest.h>

#include <cmath>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/quant_eval.h"
#include "veloxquant/quant/turboquant_mse.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace vq = veloxquant::quant;

TEST(TurboQuantRvq, ByteAccountingIsTheOriginals) {
  // compressed_key_bytes = ceil(2 d b / 8) + 2; d = 128, b = 1 is 34 bytes vs 256 of fp16: 7.53x.
  vq::TurboQuantRvq one(128, 1, 42);
  EXPECT_EQ(one.accounted_bytes_per_vector(), 34u);
  EXPECT_EQ(one.code_bytes(), 34u);
  EXPECT_NEAR(256.0 / one.code_bytes(), 7.53, 0.01);
  EXPECT_NEAR(128.0 / vq::TurboQuantRvq(64, 1, 42).code_bytes(), 7.1, 0.02);   // README: 7.1x at d = 64
  EXPECT_NEAR(512.0 / vq::TurboQuantRvq(256, 1, 42).code_bytes(), 7.8, 0.05);  // 7.76 -> "7.8x" at d = 256
  for (int bits = 1; bits <= 8; ++bits) {
    vq::TurboQuantRvq q(128, bits, 42);
    const std::size_t accounted = (2 * 128 * bits + 7) / 8 + 2;
    EXPECT_EQ(q.accounted_bytes_per_vector(), accounted);
    EXPECT_EQ(q.code_bytes(), accounted) << "dense streams store exactly what is accounted, b=" << bits;
    EXPECT_EQ(q.stream_bytes(), 16u * bits);
  }
}

TEST(TurboQuantRvq, StreamsAreTheOriginalWordLayoutForPowerOfTwoWidths) {
  vq::TurboQuantRvq q(128, 2, 42);
  const auto pairs = vq::draw_unit_pairs(128, 4, 1);
  std::vector<uint8_t> s1(4 * q.stream_bytes()), s2(4 * q.stream_bytes());
  std::vector<uint16_t> norms(4);
  q.encode_streams(pairs.x.data(), 4, s1.data(), s2.data(), norms.data());
  for (int i = 0; i < 4; ++i) {
    // Read the bytes back as little-endian uint32 words, the original's packed1 row.
    std::vector<uint32_t> words(8);
    for (int w = 0; w < 8; ++w)
      for (int b = 0; b < 4; ++b) words[w] |= static_cast<uint32_t>(s1[i * 32 + w * 4 + b]) << (8 * b);
    std::vector<uint8_t> from_words(128), expect(128);
    veloxquant::core::unpack_words(words.data(), 128, 2, from_words.data());
    // Stage-1 indices recomputed independently from the rotation and the codebook.
    std::vector<float> r(pairs.x.begin() + int64_t{128} * i, pairs.x.begin() + int64_t{128} * (i + 1));
    q.rotation().forward(r.data(), r.data());
    for (int j = 0; j < 128; ++j) expect[j] = q.stage1_codebook().quantize(r[j]);
    EXPECT_EQ(from_words, expect);
  }
}

TEST(TurboQuantRvq, StreamAndCodeApisAgreeAndScoresMatchDecode) {
  for (int bits : {1, 2, 3, 4, 6, 8}) {
    vq::TurboQuantRvq q(128, bits, 9);
    const std::size_t n = 40;
    const auto pairs = vq::draw_unit_pairs(128, n, 2);
    std::vector<uint8_t> s1(n * q.stream_bytes()), s2(n * q.stream_bytes()), codes(n * q.code_bytes());
    std::vector<uint16_t> norms(n);
    q.encode_streams(pairs.x.data(), n, s1.data(), s2.data(), norms.data());
    q.encode(pairs.x.data(), n, codes.data());
    std::vector<float> dec_a(n * 128), dec_b(n * 128);
    q.decode_streams(s1.data(), s2.data(), norms.data(), n, dec_a.data());
    q.decode(codes.data(), n, dec_b.data());
    EXPECT_EQ(dec_a, dec_b);
    const auto prepared = q.prepare_query(&pairs.y[0]);
    std::vector<float> sa(n), sb(n);
    q.score_streams(prepared, s1.data(), s2.data(), norms.data(), n, sa.data());
    q.score(prepared, codes.data(), n, sb.data());
    for (std::size_t i = 0; i < n; ++i) {
      double dot = 0;
      for (int j = 0; j < 128; ++j) dot += static_cast<double>(pairs.y[j]) * dec_a[i * 128 + j];
      EXPECT_NEAR(sa[i], dot, 2e-5) << "b=" << bits;
      EXPECT_NEAR(sb[i], dot, 2e-5) << "b=" << bits;
      EXPECT_EQ(q.score_one(prepared, &s1[i * q.stream_bytes()], &s2[i * q.stream_bytes()], norms[i]), sa[i]);
    }
  }
}

TEST(TurboQuantRvq, StageTwoRefinesStageOne) {
  // The Laplacian residual stage must cut the MSE-only error at every width.
  for (int bits = 1; bits <= 4; ++bits) {
    const auto rvq = vq::evaluate_quantizer("turboquant_rvq", bits, 128, 1000, 3);
    const auto mse = vq::evaluate_quantizer("turboquant_mse", bits, 128, 1000, 3);
    EXPECT_LT(rvq.mse, 0.8 * mse.mse) << "b=" << bits;
  }
}

TEST(TurboQuantRvq, NormFloorAndBf16Range) {
  vq::TurboQuantRvq q(64, 2, 1);
  std::vector<float> zero(64, 0.0f), out(64), unit_out(64);
  std::vector<uint8_t> code(q.code_bytes());
  q.encode(zero.data(), 1, code.data());
  const uint16_t stored = static_cast<uint16_t>(code[q.code_bytes() - 2] | code[q.code_bytes() - 1] << 8);
  EXPECT_EQ(stored, base::f32_to_bf16(1e-4f));  // the safe norm
  // A norm of 1e6 is past fp16's 65504; bf16 keeps it, and the code of 1e6 * u is the code
  // of u with that norm: the decode scales exactly (up to bf16's 2^-9 rounding of the norm).
  const auto pairs = vq::draw_unit_pairs(64, 1, 3);
  std::vector<float> big(64);
  for (int j = 0; j < 64; ++j) big[j] = pairs.x[j] * 1e6f;
  q.encode(pairs.x.data(), 1, code.data());
  q.decode(code.data(), 1, unit_out.data());
  q.encode(big.data(), 1, code.data());
  q.decode(code.data(), 1, out.data());
  for (int j = 0; j < 64; ++j) {
    ASSERT_TRUE(std::isfinite(out[j]));
    EXPECT_NEAR(out[j] / 1e6f, unit_out[j], 4e-3 * std::abs(unit_out[j]) + 1e-7);
  }
}

TEST(TurboQuantRvq, BadParametersThrowNamingTheValue) {
  for (int bits : {0, 9}) {
    try {
      const vq::TurboQuantRvq quantizer(128, bits, 1);
      FAIL();
    } catch (const veloxquant::QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bits)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(vq::TurboQuantRvq(0, 2, 1), veloxquant::QuantizerConfigError);
}
