// llama.cpp's KV cache types in lm (lm/cache/kv_cache_type.h): names, exact block sizes, the
// quantizers against ggml's own reference quantizers (fixture written by
// tools/make_kv_block_fixtures.py through libggml-base), and the SIMD tile loader against the
// scalar dequantizer, bit for bit.
#include "lm/cache/kv_cache_type.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/kernels/kv_block_simd.h"

namespace {

using lm::KVCacheType;

constexpr KVCacheType kBlockTypes[] = {KVCacheType::Q8_0, KVCacheType::Q5_0, KVCacheType::Q4_0};

std::string hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::vector<uint8_t> quantize(KVCacheType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(lm::kv_row_bytes(type, static_cast<int64_t>(x.size())));
  lm::quantize_kv_row(type, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

TEST(KVCacheType, ParsesEveryNameAndRefusesOthersNamingThem) {
  EXPECT_EQ(lm::parse_kv_cache_type("f16"), KVCacheType::F16);
  EXPECT_EQ(lm::parse_kv_cache_type("bfloat16"), KVCacheType::BF16);
  EXPECT_EQ(lm::parse_kv_cache_type("f32"), KVCacheType::F32);
  for (KVCacheType type : kBlockTypes) {
    EXPECT_EQ(lm::parse_kv_cache_type(lm::kv_cache_type_name(type)), type);
    EXPECT_TRUE(lm::is_block_kv_type(type));
    EXPECT_EQ(lm::kv_feed_dtype(type), lm::DType::F32);
  }
  EXPECT_FALSE(lm::is_block_kv_type(KVCacheType::F16));
  for (const char* bad : {"q3_0", "Q8_0", "q4_1", "", "int8"}) {
    try {
      lm::parse_kv_cache_type(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const base::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("q8_0, q5_0 or q4_0"), std::string::npos) << e.what();
    }
  }
}

TEST(KVCacheType, RowBytesAreLlamaCppBlockSizes) {
  EXPECT_EQ(lm::kv_row_bytes(KVCacheType::Q8_0, 64), 68u);
  EXPECT_EQ(lm::kv_row_bytes(KVCacheType::Q5_0, 64), 44u);
  EXPECT_EQ(lm::kv_row_bytes(KVCacheType::Q4_0, 128), 72u);
  EXPECT_EQ(lm::kv_row_bytes(KVCacheType::F16, 64), 128u);
  EXPECT_THROW(lm::kv_row_bytes(KVCacheType::Q8_0, 48), base::InvalidArgument);
  EXPECT_THROW(lm::kv_row_bytes(KVCacheType::Q4_0, 0), base::InvalidArgument);
  std::vector<float> x(48, 1.0f);
  std::vector<uint8_t> out(64);
  EXPECT_THROW(lm::quantize_kv_row(KVCacheType::Q5_0, x.data(), out.data(), 48), base::InvalidArgument);
  EXPECT_THROW(lm::quantize_kv_row(KVCacheType::F16, x.data(), out.data(), 32), base::InvalidArgument);
}

TEST(KVCacheType, QuantizersMatchGgmlReferenceBytesAndDequantization) {
  std::ifstream in(std::string(VQ_SOURCE_DIR) + "/tests/fixtures/kv_blocks/ggml_kv_blocks.json");
  ASSERT_TRUE(in) << "fixture missing (tools/make_kv_block_fixtures.py)";
  const auto fixture = nlohmann::json::parse(in);
  const int64_t d = fixture.at("elements_per_row").get<int64_t>();
  ASSERT_GE(fixture.at("rows").size(), 10u);
  int row_index = 0;
  for (const auto& row : fixture.at("rows")) {
    std::vector<float> x;
    for (uint32_t bits : row.at("input_bits").get<std::vector<uint32_t>>()) x.push_back(std::bit_cast<float>(bits));
    ASSERT_EQ(static_cast<int64_t>(x.size()), d);
    for (KVCacheType type : kBlockTypes) {
      const std::string name(lm::kv_cache_type_name(type));
      const std::vector<uint8_t> blocks = quantize(type, x);
      EXPECT_EQ(hex(blocks), row.at(name).get<std::string>()) << name << " row " << row_index;
      const auto expected = row.at(name + "_dequantized_bits").get<std::vector<uint32_t>>();
      std::vector<float> scalar(d), simd(d);
      lm::dequantize_kv_row(type, blocks.data(), scalar.data(), d);
      lm::kernels::simd::dequantize_kv_rows(type, reinterpret_cast<const std::byte*>(blocks.data()),
                                            static_cast<int64_t>(blocks.size()), 1, d, simd.data());
      for (int64_t i = 0; i < d; ++i) {
        EXPECT_EQ(std::bit_cast<uint32_t>(scalar[i]), expected[i]) << name << " row " << row_index << " element " << i;
        EXPECT_EQ(std::bit_cast<uint32_t>(simd[i]), expected[i]) << name << " row " << row_index << " element " << i;
      }
    }
    ++row_index;
  }
}

// The error bound each format promises: half a step of its scale per element, except that
// q4_0 / q5_0 put the block's extreme on the lowest code, so values of the other sign beyond
// offset - 1 steps are clipped onto the top code (up to one step off).
TEST(KVCacheType, RoundTripErrorIsWithinHalfAStepExceptTheClippedSide) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(256);
  for (float& v : x) v = normal(rng);
  for (KVCacheType type : kBlockTypes) {
    const std::vector<uint8_t> blocks = quantize(type, x);
    std::vector<float> back(x.size());
    lm::dequantize_kv_row(type, blocks.data(), back.data(), 256);
    const float offset = type == KVCacheType::Q8_0 ? 127.0f : type == KVCacheType::Q5_0 ? 16.0f : 8.0f;
    int clipped = 0;
    for (int b = 0; b < 8; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      // Plus the f16 rounding of the scale (relative 2^-11), which every code up to `offset`
      // multiplies.
      const float step = amax / offset, scale_slack = offset * step / 2048.0f;
      for (int j = 0; j < 32; ++j) {
        const float value = x[b * 32 + j], error = std::fabs(back[b * 32 + j] - value);
        const bool beyond_top = type != KVCacheType::Q8_0 && std::fabs(value) > (offset - 1.0f) * amax / offset;
        clipped += beyond_top;
        EXPECT_LE(error, (beyond_top ? step : 0.5f * step) + scale_slack)
            << lm::kv_cache_type_name(type) << " element " << b * 32 + j;
      }
    }
    if (type != KVCacheType::Q8_0) {
      EXPECT_GT(clipped, 0) << "the sample never reaches the clipped side";
    }
  }
}

TEST(KVCacheType, SimdTileLoaderEqualsScalarOnStridedRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t kD = 128, kRows = 37;
  for (KVCacheType type : kBlockTypes) {
    const int64_t row_bytes = static_cast<int64_t>(lm::kv_row_bytes(type, kD)), stride = row_bytes + 6;
    std::vector<uint8_t> buffer(static_cast<std::size_t>(stride * kRows));
    std::vector<float> x(kD);
    for (int64_t r = 0; r < kRows; ++r) {
      for (float& v : x) v = normal(rng) * static_cast<float>(r + 1);
      lm::quantize_kv_row(type, x.data(), buffer.data() + r * stride, kD);
    }
    std::vector<float> simd(static_cast<std::size_t>(kRows * kD)), scalar(kD);
    lm::kernels::simd::dequantize_kv_rows(type, reinterpret_cast<const std::byte*>(buffer.data()), stride, kRows, kD,
                                          simd.data());
    for (int64_t r = 0; r < kRows; ++r) {
      lm::dequantize_kv_row(type, buffer.data() + r * stride, scalar.data(), kD);
      for (int64_t i = 0; i < kD; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(simd[r * kD + i]), std::bit_cast<uint32_t>(scalar[i]))
            << lm::kv_cache_type_name(type) << " row " << r << " element " << i;
      }
    }
  }
}

}  // namespace
