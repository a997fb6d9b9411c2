// The SIMD row dequantizers (lm/kernels/simd_dequantize.h) against the scalar references,
// bit for bit, on every SIMD target this build compiled and the CPU supports. Random blocks
// reach every code and packed-scale bit pattern; the f16 scale fields get random finite
// values of both signs, subnormals included (bit equality holds for them too: the same IEEE
// operations in the same order). Their agreement with gguf-py is checked on the fixtures in
// weight_formats_reference_test.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "lm/kernels/simd_dequantize.h"
#include "lm/weights/dequantize.h"
#include "lm/weights/ggml_type.h"
#include "support/simd_targets.h"

namespace {

using lm::GgmlType;

// Byte offsets of the f16 fields in one block (lm/weights/block_formats.h).
std::vector<std::size_t> f16_fields(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q6_K:
      return {208};
    case GgmlType::Q2_K:
      return {80, 82};
    case GgmlType::Q3_K:
      return {108};
    default:
      return {};
  }
}

std::vector<uint8_t> random_row(GgmlType type, int64_t n, std::mt19937& rng) {
  const auto info = lm::ggml_type_info(type);
  std::vector<uint8_t> bytes(lm::ggml_row_bytes(type, n));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> log_mag(std::log(1e-7f), std::log(0.1f));
  for (int64_t k = 0; k < n / info.block_size; ++k) {
    for (std::size_t off : f16_fields(type)) {
      const float v = std::exp(log_mag(rng)) * ((rng() & 3) == 0 ? -1.0f : 1.0f);
      const uint16_t h = base::f32_to_f16(v);
      std::memcpy(bytes.data() + static_cast<std::size_t>(k) * info.type_size + off, &h, 2);
    }
  }
  return bytes;
}

class SimdDequantize : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SimdDequantize, EqualsTheScalarReferenceBitForBitOnEveryTarget) {
  const GgmlType type = GetParam();
  ASSERT_TRUE(lm::kernels::has_simd_dequantize(type));
  std::mt19937 rng(31 + static_cast<int>(type));
  const int64_t n = 1024;
  for (int trial = 0; trial < 10; ++trial) {
    const auto row = random_row(type, n, rng);
    std::vector<float> expected(n), got(n);
    lm::dequantize_row(type, row.data(), expected.data(), n);
    test_support::for_each_simd_target([&](const char* target) {
      std::fill(got.begin(), got.end(), 123.0f);
      lm::kernels::dequantize_row_fast(type, row.data(), got.data(), n);
      int mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        // Bit-exact: the bits compared, so -0 against +0 or two NaN payloads still differ.
        if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(expected[i]) && ++mismatches <= 3) {
          ADD_FAILURE() << lm::ggml_type_name(type) << " " << target << " element " << i << ": " << got[i] << " vs "
                        << expected[i];
        }
      }
      EXPECT_EQ(mismatches, 0) << target;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SimdDequantize,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                                           GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q5_K,
                                           GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS),
                         [](const auto& info) { return lm::ggml_type_name(info.param); });

TEST(SimdDequantize, OtherTypesFallBackToTheReference) {
  EXPECT_FALSE(lm::kernels::has_simd_dequantize(GgmlType::F16));
  const uint16_t halves[4] = {base::f32_to_f16(0.5f), base::f32_to_f16(-2.0f), 0, base::f32_to_f16(1e-6f)};
  std::vector<float> a(4), b(4);
  lm::dequantize_row(GgmlType::F16, halves, a.data(), 4);
  lm::kernels::dequantize_row_fast(GgmlType::F16, halves, b.data(), 4);
  EXPECT_EQ(a, b);
  // Bad arguments keep the reference's errors.
  std::vector<uint8_t> row(1024);
  EXPECT_ANY_THROW(lm::kernels::dequantize_row_fast(GgmlType::Q5_K, row.data(), b.data(), 100));
  EXPECT_ANY_THROW(lm::kernels::dequantize_row_fast(GgmlType::IQ2_XXS, row.data(), b.data(), 256));
}

}  // namespace
