// I16 activations (lm/kernels/i16_activations.h): the quantizer on a hand-computed block and
// bit-exact against its scalar definition; the integer dot products of every quantized weight
// format against their reference (same inputs, sums in double) within the f32 rounding bound;
// the whole approximation against the f32 reference within the bound the 8-bit rounding
// implies; and the matmul decode path built on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/kernels/matmul.h"
#include "lm/kernels/i16_activations.h"
#include "lm/kernels/vec_dot.h"
#include "lm/weights/dequantize.h"
#include "lm/weights/ggml_type.h"
#include "lm/weights/weight_matrix.h"
#include "support/simd_targets.h"

namespace {

using lm::GgmlType;
using lm::kernels::I16Block;
using lm::kernels::kI16Block;

// Random blocks with sane scales (random bytes would make f16 scales inf or NaN).
std::vector<uint8_t> random_row(GgmlType type, int64_t n, std::mt19937& rng) {
  const auto info = lm::ggml_type_info(type);
  std::vector<uint8_t> bytes(lm::ggml_row_bytes(type, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const auto put = [&](std::size_t offset, float v) {
    const uint16_t h = base::f32_to_f16(v);
    std::memcpy(bytes.data() + offset, &h, 2);
  };
  for (int64_t k = 0; k < n / info.block_size; ++k) {
    const std::size_t at = static_cast<std::size_t>(k) * info.type_size;
    switch (type) {
      case GgmlType::Q4_0:
      case GgmlType::Q8_0:
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS:
        put(at, scale(rng));
        break;
      case GgmlType::Q4_1:
        put(at, scale(rng));
        put(at + 2, -8.0f * scale(rng));
        break;
      case GgmlType::Q5_1:
        put(at, scale(rng));
        put(at + 2, -16.0f * scale(rng));
        break;
      case GgmlType::Q2_K:
        put(at + 80, scale(rng));
        put(at + 82, scale(rng));
        break;
      case GgmlType::Q3_K:
        put(at + 108, scale(rng));
        break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put(at, scale(rng));
        put(at + 2, scale(rng));
        break;
      case GgmlType::Q6_K:
        put(at + 208, scale(rng));
        break;
      default:
        break;
    }
  }
  return bytes;
}

// Runs body once per SIMD target this build compiled and the CPU supports (AVX-512, AVX2,
// SSE4, SSSE3, scalar ... on x86), so the x86-specific and the portable kernels are all
// checked on this machine, not only the one dispatch picks.
template <class Body>
void for_each_target(Body body) {
  test_support::for_each_simd_target([&](const char* target) {
    SCOPED_TRACE(target);
    body();
  });
}

std::vector<I16Block> quantize(const std::vector<float>& x) {
  std::vector<I16Block> blocks(x.size() / kI16Block);
  lm::kernels::quantize_i16(x.data(), static_cast<int64_t>(x.size()), blocks.data());
  return blocks;
}

TEST(I16Activations, QuantizesAHandComputedBlock) {
  // x_i = i - 15.5: max |x| = 15.5, d = 15.5 / 32767, q_i = round((i - 15.5) * 32767 / 15.5).
  std::vector<float> x(kI16Block);
  for (int i = 0; i < kI16Block; ++i) x[i] = static_cast<float>(i) - 15.5f;
  const auto b = quantize(x);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_FLOAT_EQ(b[0].d, 15.5f / 32767.0f);
  EXPECT_EQ(b[0].q[0], -32767);
  EXPECT_EQ(b[0].q[31], 32767);
  EXPECT_EQ(b[0].q[15], -1057);  // -0.5 * 2113.99 = -1057.0
  EXPECT_EQ(b[0].q[16], 1057);
  EXPECT_EQ(b[0].q[20], 9513);   // 4.5 * 2113.99 = 9512.9
  EXPECT_EQ(b[0].q[3], -26425);  // -12.5 * 2113.99 = -26424.9
  // Antisymmetric input, so the codes sum to zero.
  EXPECT_EQ(b[0].sum, 0.0f);

  // An all-zero block: scale 0, codes 0 (no division by zero), and the next block is
  // independent of it.
  std::vector<float> z(std::size_t{2} * kI16Block, 0.0f);
  z[kI16Block] = -2.0f;
  z[kI16Block + 1] = 0.25f;
  const auto bz = quantize(z);
  EXPECT_EQ(bz[0].d, 0.0f);
  EXPECT_EQ(bz[0].sum, 0.0f);
  for (int i = 0; i < kI16Block; ++i) EXPECT_EQ(bz[0].q[i], 0);
  EXPECT_FLOAT_EQ(bz[1].d, 2.0f / 32767.0f);
  EXPECT_EQ(bz[1].q[0], -32767);
  EXPECT_EQ(bz[1].q[1], 4096);  // 0.25 * 16383.5 = 4095.875
  EXPECT_FLOAT_EQ(bz[1].sum, 2.0f / 32767.0f * (-32767 + 4096));
}

TEST(I16Activations, SimdQuantizerEqualsTheScalarDefinition) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(4096);
  for (auto& v : x) v = normal(rng);
  x[100] = 0.0f;
  std::vector<I16Block> ref(x.size() / kI16Block);
  lm::kernels::quantize_i16_reference(x.data(), static_cast<int64_t>(x.size()), ref.data());
  for_each_target([&] {
    const auto fast = quantize(x);
    for (std::size_t b = 0; b < fast.size(); ++b) {
      EXPECT_EQ(fast[b].d, ref[b].d) << b;
      EXPECT_EQ(fast[b].sum, ref[b].sum) << b;
      EXPECT_EQ(0, std::memcmp(fast[b].q, ref[b].q, kI16Block)) << b;
    }
  });
}

class I16Dot : public ::testing::TestWithParam<GgmlType> {};

TEST_P(I16Dot, AgreesWithItsReferenceAndWithTheF32Dot) {
  const GgmlType type = GetParam();
  ASSERT_TRUE(lm::kernels::has_i16_dot(type));
  std::mt19937 rng(77 + static_cast<int>(type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Row widths: whole groups of eight blocks, Gemma 3's 640 (8 + 8 + 4 blocks of 32) and 224
  // (4 + 3), so the batched-scale kernels' every step and tail are covered; K formats need
  // whole super-blocks (768: 24 blocks of 32, 256: 8).
  const bool k_format = lm::ggml_type_info(type).block_size == 256;
  const int64_t widths[] = {1024, k_format ? 768 : 640, k_format ? 256 : 224};
  for (int trial = 0; trial < 21; ++trial) {
    const int64_t n = widths[trial % 3];
    const auto row = random_row(type, n, rng);
    std::vector<float> x(n), w(n);
    for (auto& v : x) v = normal(rng);
    lm::dequantize_row(type, row.data(), w.data(), n);
    const auto xq = quantize(x);

    // 1. Same inputs as the reference: integer sums are exact, so only f32 rounding of the
    // per-block scaling and the accumulation remains (terms counted with the block minimum).
    double max_w = 0.0, magnitude_q = 0.0, magnitude = 0.0, rounding = 0.0;
    for (int64_t i = 0; i < n; ++i) max_w = std::max(max_w, std::abs(double(w[i])));
    for (int64_t i = 0; i < n; ++i) {
      const I16Block& b = xq[i / kI16Block];
      const double xi = double(b.d) * b.q[i % kI16Block];
      magnitude_q += (std::abs(double(w[i])) + max_w) * std::abs(xi);
      magnitude += std::abs(double(w[i])) * std::abs(double(x[i]));
      // Round to nearest: |x - d q| <= d / 2 (plus the rounding of x / d itself).
      rounding += std::abs(double(w[i])) * double(b.d) * (0.5 + 1e-6);
    }
    const double f32_bound = (n + 16) * std::ldexp(1.0, -24) * magnitude_q;
    const float reference = lm::kernels::vec_dot_i16_reference(type, row.data(), xq.data(), n);
    const float exact = lm::kernels::vec_dot_reference(type, row.data(), x.data(), n);
    for_each_target([&] {
      const float fast = lm::kernels::vec_dot_i16(type, row.data(), xq.data(), n);
      EXPECT_LE(std::abs(double(fast) - reference), f32_bound) << lm::ggml_type_name(type) << " trial " << trial;
      // 2. Against f32 activations: the 16-bit rounding bound (about 1e-4 of the terms'
      // magnitude for normal activations, far below what a wrong code or scale moves).
      EXPECT_LE(std::abs(double(fast) - exact), rounding + 2 * f32_bound)
          << lm::ggml_type_name(type) << " trial " << trial;
    });
    EXPECT_LT(rounding, 2e-4 * magnitude);
  }
}

TEST_P(I16Dot, MatmulDecodePathUsesItThreadedOrNot) {
  const GgmlType type = GetParam();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37, cols = 512;
  std::vector<uint8_t> data;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = random_row(type, cols, rng);
    data.insert(data.end(), row.begin(), row.end());
  }
  const lm::WeightMatrix w = lm::WeightMatrix::view(type, rows, cols, data.data(), nullptr, "random");
  base::ThreadPool pool(3);
  const int64_t tokens = 3;
  std::vector<float> x(tokens * cols);
  for (auto& v : x) v = normal(rng);
  const auto xq = quantize(x);
  std::vector<float> serial(tokens * rows), threaded(serial.size()), f32(serial.size());
  using lm::kernels::Activations;
  lm::kernels::matmul(w, x.data(), tokens, serial.data(), nullptr, Activations::kI16);
  lm::kernels::matmul(w, x.data(), tokens, threaded.data(), &pool, Activations::kI16);
  lm::kernels::matmul(w, x.data(), tokens, f32.data(), &pool, Activations::kF32);
  EXPECT_EQ(serial, threaded);
  bool any_differs = false;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const std::size_t i = static_cast<std::size_t>(t * rows + r);
      EXPECT_EQ(serial[i], lm::kernels::vec_dot_i16(type, w.row(r), xq.data() + t * cols / kI16Block, cols))
          << t << " " << r;
      EXPECT_EQ(f32[i], lm::kernels::vec_dot(type, w.row(r), x.data() + t * cols, cols)) << t << " " << r;
      any_differs = any_differs || serial[i] != f32[i];
    }
  }
  EXPECT_TRUE(any_differs) << "the I16 path was not taken";
}

// The matmul decode path dots a range of rows at once (vec_dot_i16_rows), which for Q4_1 and
// Q8_0 copies the activation scales out once and on AVX-512 sums two blocks per 512-bit
// multiply-add: it must give each row's vec_dot_i16 exactly, on every target, for widths that
// end in a group of four and a per-block tail (640 = 8 + 8 + 4 blocks, 224 = 4 + 3, 288 = 8 + 1)
// and for rows wider than the scale copies hold (33,024 = 1,032 blocks).
TEST_P(I16Dot, RowRangesEqualRowByRowOnEveryTarget) {
  const GgmlType type = GetParam();
  if (lm::ggml_type_info(type).block_size == 256) GTEST_SKIP() << "block-32 formats only";
  std::mt19937 rng(23 + static_cast<int>(type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t cols : {int64_t{640}, int64_t{224}, int64_t{288}, int64_t{1536}, int64_t{33024}}) {
    const int64_t rows = cols > 4096 ? 3 : 11;
    std::vector<uint8_t> data;
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = random_row(type, cols, rng);
      data.insert(data.end(), row.begin(), row.end());
    }
    const std::size_t row_bytes = data.size() / static_cast<std::size_t>(rows);
    std::vector<float> x(cols);
    for (auto& v : x) v = normal(rng);
    const auto xq = quantize(x);
    for_each_target([&] {
      std::vector<float> ranged(rows);
      lm::kernels::vec_dot_i16_rows(type, data.data(), row_bytes, rows, xq.data(), cols, ranged.data());
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(ranged[r], lm::kernels::vec_dot_i16(type, data.data() + r * row_bytes, xq.data(), cols))
            << lm::ggml_type_name(type) << " cols " << cols << " row " << r;
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, I16Dot,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                                           GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
                                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::IQ4_XS),
                         [](const auto& info) { return lm::ggml_type_name(info.param); });

TEST(I16Activations, FloatFormatsHaveNoI16DotAndStayF32) {
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    EXPECT_FALSE(lm::kernels::has_i16_dot(type));
    std::vector<I16Block> blocks(1);
    float row[32] = {};
    EXPECT_THROW(lm::kernels::vec_dot_i16(type, row, blocks.data(), 32), base::Unsupported);
  }
  // A float matrix asked for I16 activations computes the f32 product.
  std::vector<float> wdata(std::size_t{4} * 64), x(64), i16(4), f32(4);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : wdata) v = normal(rng);
  for (auto& v : x) v = normal(rng);
  const lm::WeightMatrix w = lm::WeightMatrix::view(GgmlType::F32, 4, 64, wdata.data(), nullptr, "f32");
  lm::kernels::matvec(w, x.data(), i16.data(), nullptr, lm::kernels::Activations::kI16);
  lm::kernels::matvec(w, x.data(), f32.data(), nullptr, lm::kernels::Activations::kF32);
  EXPECT_EQ(i16, f32);
}

}  // namespace
