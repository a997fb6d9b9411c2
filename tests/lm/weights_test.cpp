// GGML block formats: the type table, the scalar dequantizers on hand-built blocks whose
// values follow from the format definitions, and the fused dot products against the scalar
// reference on random blocks. (Bit-exact agreement with gguf-py / llama.cpp dequantization is
// checked by weight_formats_reference_test.cpp on fixtures those tools produced.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/kernels/matmul.h"
#include "lm/kernels/vec_dot.h"
#include "lm/weights/block_formats.h"
#include "lm/weights/dequantize.h"
#include "lm/weights/ggml_type.h"
#include "lm/weights/weight_matrix.h"
#include "support/simd_targets.h"

namespace {

using lm::GgmlType;

TEST(GgmlTypes, BlockGeometryMatchesTheGgufSpec) {
  // (block elements, bytes per block) from the GGUF specification's type table.
  struct Row {
    GgmlType type;
    int64_t block;
    std::size_t bytes;
  };
  for (const Row& r : {Row{GgmlType::F32, 1, 4}, Row{GgmlType::F16, 1, 2}, Row{GgmlType::BF16, 1, 2},
                       Row{GgmlType::Q4_0, 32, 18}, Row{GgmlType::Q4_1, 32, 20}, Row{GgmlType::Q8_0, 32, 34},
                       Row{GgmlType::Q4_K, 256, 144}, Row{GgmlType::Q6_K, 256, 210}, Row{GgmlType::Q5_0, 32, 22},
                       Row{GgmlType::Q5_1, 32, 24}, Row{GgmlType::IQ4_NL, 32, 18}, Row{GgmlType::Q2_K, 256, 84},
                       Row{GgmlType::Q3_K, 256, 110}, Row{GgmlType::Q5_K, 256, 176}, Row{GgmlType::IQ4_XS, 256, 136}}) {
    const auto info = lm::ggml_type_info(r.type);
    EXPECT_EQ(info.block_size, r.block) << info.name;
    EXPECT_EQ(info.type_size, r.bytes) << info.name;
    EXPECT_TRUE(info.supported) << info.name;
  }
  // Formats still without a dequantizer: named, sized, refused.
  for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::IQ3_S, GgmlType::IQ1_M, GgmlType::Q8_1, GgmlType::TQ2_0}) {
    EXPECT_FALSE(lm::ggml_type_supported(type)) << lm::ggml_type_name(type);
  }
  EXPECT_EQ(lm::ggml_type_name(GgmlType::Q6_K), "Q6_K");
  EXPECT_EQ(lm::ggml_type_name(static_cast<GgmlType>(77)), "type 77");
  EXPECT_EQ(lm::ggml_row_bytes(GgmlType::Q4_K, 512), 288u);
  EXPECT_EQ(lm::ggml_row_bytes(GgmlType::Q8_0, 576), 18u * 34u);
  EXPECT_THROW(lm::ggml_row_bytes(GgmlType::Q8_0, 20), base::FormatError);
  EXPECT_THROW(lm::ggml_row_bytes(static_cast<GgmlType>(77), 32), base::Unsupported);
}

TEST(Dequantize, Q4_0HandBuilt) {
  lm::BlockQ4_0 b{};
  b.d = base::f32_to_f16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> y(32);
  lm::dequantize_row(GgmlType::Q4_0, &b, y.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * (7 - j));
  }
}

TEST(Dequantize, Q4_1HandBuilt) {
  lm::BlockQ4_1 b{};
  b.d = base::f32_to_f16(0.25f);
  b.m = base::f32_to_f16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> y(32);
  lm::dequantize_row(GgmlType::Q4_1, &b, y.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * j - 1.0f);
    EXPECT_EQ(y[j + 16], 0.25f * (15 - j) - 1.0f);
  }
}

TEST(Dequantize, Q8_0HandBuilt) {
  lm::BlockQ8_0 b[2]{};
  for (int k = 0; k < 2; ++k) {
    b[k].d = base::f32_to_f16(k == 0 ? 2.0f : -0.125f);
    for (int j = 0; j < 32; ++j) b[k].qs[j] = static_cast<int8_t>(j - 16);
  }
  std::vector<float> y(64);
  lm::dequantize_row(GgmlType::Q8_0, b, y.data(), 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 16));
    EXPECT_EQ(y[32 + j], -0.125f * (j - 16));
  }
}

// Q4_K scales: eight 6-bit (scale, min) pairs. Pairs 0..3 sit in the low six bits of bytes
// 0..3 / 4..7; pairs 4..7 keep their low four bits in bytes 8..11 (scale low nibble, min high
// nibble) and their top two bits in the top bits of bytes 0..3 (scale) / 4..7 (min).
void pack_q4_k_scales(const int sc[8], const int mn[8], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] & 63);
    out[j + 4] = static_cast<uint8_t>(mn[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    out[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((mn[j] & 15) << 4));
    out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    out[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
  }
}

TEST(Dequantize, Q4_KHandBuilt) {
  lm::BlockQ4_K b{};
  b.d = base::f32_to_f16(1.0f);
  b.dmin = base::f32_to_f16(0.5f);
  const int sc[8] = {1, 2, 3, 63, 40, 45, 50, 17};
  const int mn[8] = {0, 5, 62, 7, 33, 48, 1, 60};
  pack_q4_k_scales(sc, mn, b.scales);
  for (int i = 0; i < 128; ++i) {
    const int l = i % 32;
    b.qs[i] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  }
  std::vector<float> y(256);
  lm::dequantize_row(GgmlType::Q4_K, &b, y.data(), 256);
  // Element 64g + l (l < 32) is sub-block 2g from the low nibble of qs[32g + l]; element
  // 64g + 32 + l is sub-block 2g+1 from the high nibble.
  for (int64_t g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(y[64 * g + l], 1.0f * sc[2 * g] * (l % 16) - 0.5f * mn[2 * g]) << g << " " << l;
      EXPECT_EQ(y[64 * g + 32 + l], 1.0f * sc[2 * g + 1] * (15 - l % 16) - 0.5f * mn[2 * g + 1]) << g << " " << l;
    }
  }
}

TEST(Dequantize, Q6_KHandBuilt) {
  lm::BlockQ6_K b{};
  b.d = base::f32_to_f16(0.5f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s * 9 - 70);
  std::vector<int> q(256);
  for (int e = 0; e < 256; ++e) q[e] = (e * 7 + 3) % 64;
  // Element 128h + 32k + l: low 4 bits in ql[64h + l + 32(k&1)] (low nibble for k < 2, high
  // for k >= 2), high 2 bits at bit 2k of qh[32h + l]; scale index 8h + l/16 + 2k.
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int v = q[128 * h + 32 * k + l];
        uint8_t& lo = b.ql[64 * h + l + 32 * (k & 1)];
        lo |= static_cast<uint8_t>(k < 2 ? (v & 15) : (v & 15) << 4);
        b.qh[32 * h + l] |= static_cast<uint8_t>((v >> 4) << (2 * k));
      }
    }
  }
  std::vector<float> y(256);
  lm::dequantize_row(GgmlType::Q6_K, &b, y.data(), 256);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * h + 32 * k + l, half = l / 16;  // 16 elements per scale
        const float expected = 0.5f * static_cast<float>(b.scales[8 * h + half + 2 * k] * (q[e] - 32));
        EXPECT_EQ(y[e], expected) << e;
      }
    }
  }
}

TEST(Dequantize, FloatFormats) {
  const std::vector<float> values{0.0f, -1.5f, 65504.0f, 1e-7f, 3.14159f};
  std::vector<uint16_t> h, bf;
  for (float v : values) {
    h.push_back(base::f32_to_f16(v));
    bf.push_back(base::f32_to_bf16(v));
  }
  std::vector<float> y(values.size());
  lm::dequantize_row(GgmlType::F16, h.data(), y.data(), 5);
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(y[i], base::f16_to_f32(h[i]));
  EXPECT_EQ(y[2], 65504.0f);
  lm::dequantize_row(GgmlType::BF16, bf.data(), y.data(), 5);
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(y[i], base::bf16_to_f32(bf[i]));
  lm::dequantize_row(GgmlType::F32, values.data(), y.data(), 5);
  EXPECT_EQ(y, values);
}

TEST(Dequantize, RejectsBadArguments) {
  std::vector<float> y(64);
  lm::BlockQ8_0 b[2]{};
  EXPECT_THROW(lm::dequantize_row(GgmlType::Q8_0, b, y.data(), 40), base::InvalidArgument);
  try {
    lm::dequantize_row(GgmlType::IQ2_XXS, b, y.data(), 256);
    FAIL();
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos);
  }
}

// Random rows of `blocks` blocks: random bytes with every f16 scale field replaced by a
// finite value of a realistic size (random bytes would give NaN/inf scales).
std::vector<uint8_t> random_row(GgmlType type, int64_t n, std::mt19937& rng) {
  const auto info = lm::ggml_type_info(type);
  std::vector<uint8_t> bytes(lm::ggml_row_bytes(type, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), sym(-1.0f, 1.0f);
  const auto put = [&](std::size_t offset, float v) {
    const uint16_t h = base::f32_to_f16(v);
    std::memcpy(bytes.data() + offset, &h, 2);
  };
  const int64_t blocks = n / info.block_size;
  for (int64_t k = 0; k < blocks; ++k) {
    const std::size_t at = static_cast<std::size_t>(k) * info.type_size;
    switch (type) {
      case GgmlType::F32: {
        const float v = sym(rng);
        std::memcpy(bytes.data() + at, &v, 4);
        break;
      }
      case GgmlType::F16:
        put(at, sym(rng));
        break;
      case GgmlType::BF16: {
        const uint16_t v = base::f32_to_bf16(sym(rng));
        std::memcpy(bytes.data() + at, &v, 2);
        break;
      }
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
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put(at, scale(rng));
        put(at + 2, scale(rng));
        break;
      case GgmlType::Q2_K:
        put(at + 80, scale(rng));
        put(at + 82, scale(rng));
        break;
      case GgmlType::Q3_K:
        put(at + 108, scale(rng));
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
// SSE4, ... and the portable fallback), not only the one dispatch picks.
template <class Body>
void for_each_target(Body body) {
  test_support::for_each_simd_target([&](const char* target) {
    SCOPED_TRACE(target);
    body();
  });
}

class FusedDot : public ::testing::TestWithParam<GgmlType> {};

TEST_P(FusedDot, AgreesWithTheScalarReference) {
  const GgmlType type = GetParam();
  std::mt19937 rng(1234 + static_cast<int>(type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 1024;
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<uint8_t> row = random_row(type, n, rng);
    std::vector<float> x(n), w(n);
    for (auto& v : x) v = normal(rng);
    lm::dequantize_row(type, row.data(), w.data(), n);
    // Error bound for f32 sums of n terms in any order: n * 2^-24 * sum|terms|, with the
    // factored form's extra terms (block minimum times the block's x) counted too.
    double magnitude = 0.0, max_w = 0.0;
    for (int64_t i = 0; i < n; ++i) max_w = std::max(max_w, std::abs(double(w[i])));
    for (int64_t i = 0; i < n; ++i) magnitude += (std::abs(double(w[i])) + max_w) * std::abs(double(x[i]));
    const double bound = (n + 16) * std::ldexp(1.0, -24) * magnitude;
    const float reference = lm::kernels::vec_dot_reference(type, row.data(), x.data(), n);
    for_each_target([&] {
      const float fused = lm::kernels::vec_dot(type, row.data(), x.data(), n);
      EXPECT_LE(std::abs(double(fused) - reference), bound) << lm::ggml_type_name(type) << " trial " << trial;
      // The generic fallback (dequantize a super-block, f32 dot) for any future format.
      const float by_blocks = lm::kernels::dot_by_blocks(type, row.data(), x.data(), n);
      EXPECT_LE(std::abs(double(by_blocks) - reference), bound) << lm::ggml_type_name(type) << " trial " << trial;
    });
    // And the bound is tight enough to matter: under 1% of the terms' magnitude, while a
    // swapped nibble or a dropped block moves the sum by a sizeable fraction of it.
    EXPECT_LT(bound, 0.01 * magnitude);
  }
}

TEST_P(FusedDot, MatmulThreadedEqualsReference) {
  const GgmlType type = GetParam();
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37, cols = 512;
  std::vector<uint8_t> data;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = random_row(type, cols, rng);
    data.insert(data.end(), row.begin(), row.end());
  }
  const lm::WeightMatrix w = lm::WeightMatrix::view(type, rows, cols, data.data(), nullptr, "random");
  base::ThreadPool pool(3);
  // 3 tokens: the fused block-dot path; 11: the prefill path (4x4 tiles, a 4-row tail over
  // tokens 8..10, and rows 36 as a single-row remainder).
  for (int64_t tokens : {3, 11}) {
    std::vector<float> x(tokens * cols);
    for (auto& v : x) v = normal(rng);
    std::vector<float> serial(tokens * rows), threaded(tokens * rows), reference(tokens * rows), vec(rows);
    lm::kernels::matmul(w, x.data(), tokens, serial.data(), nullptr);
    lm::kernels::matmul(w, x.data(), tokens, threaded.data(), &pool);
    lm::kernels::matmul_reference(w, x.data(), tokens, reference.data());
    EXPECT_EQ(serial, threaded);  // each output is computed by one thread, in the same order
    if (tokens < 4) {
      lm::kernels::matvec(w, x.data() + cols, vec.data(), &pool);
      for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(vec[r], serial[rows + r]);
    }
    for (std::size_t i = 0; i < serial.size(); ++i) {
      EXPECT_NEAR(serial[i], reference[i], 1e-3 * (1.0 + std::abs(reference[i]))) << tokens << " " << i;
    }
  }
}

TEST_P(FusedDot, MatmulManyEqualsSeparateProducts) {
  const GgmlType type = GetParam();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t cols = 256;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<lm::WeightMatrix> mats;
  for (int64_t rows : {5, 33, 18}) {
    std::vector<uint8_t> data;
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = random_row(type, cols, rng);
      data.insert(data.end(), row.begin(), row.end());
    }
    storage.push_back(std::move(data));
    mats.push_back(lm::WeightMatrix::view(type, rows, cols, storage.back().data(), nullptr, "m"));
  }
  base::ThreadPool pool(3);
  for (int64_t tokens : {1, 6}) {  // the decode path and the 4-row prefill path
    std::vector<float> x(tokens * cols);
    for (auto& v : x) v = normal(rng);
    std::vector<std::vector<float>> separate, fused;
    std::vector<lm::kernels::MatmulJob> jobs;
    for (const auto& m : mats) {
      separate.emplace_back(tokens * m.rows);
      fused.emplace_back(tokens * m.rows);
      lm::kernels::matmul(m, x.data(), tokens, separate.back().data(), nullptr);
    }
    for (std::size_t j = 0; j < mats.size(); ++j) jobs.push_back({&mats[j], fused[j].data()});
    lm::kernels::matmul_many(jobs, x.data(), tokens, &pool);
    EXPECT_EQ(fused, separate) << tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, FusedDot,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0,
                                           GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                                           GgmlType::Q5_K, GgmlType::IQ4_XS),
                         [](const auto& info) { return lm::ggml_type_name(info.param); });

TEST(WeightMatrix, ViewValidates) {
  std::vector<uint8_t> data(std::size_t{34} * 4);
  const auto w = lm::WeightMatrix::view(GgmlType::Q8_0, 2, 64, data.data(), nullptr, "ok");
  EXPECT_EQ(w.row_bytes, 68u);
  EXPECT_EQ(w.row(1) - w.row(0), 68);
  EXPECT_EQ(w.nbytes(), 136u);
  EXPECT_THROW(lm::WeightMatrix::view(GgmlType::Q8_0, 2, 48, data.data(), nullptr, "bad"), base::FormatError);
  EXPECT_THROW(lm::WeightMatrix::view(GgmlType::Q8_1, 2, 64, data.data(), nullptr, "q8_1"), base::Unsupported);
  EXPECT_THROW(lm::WeightMatrix::view(GgmlType::F32, 0, 64, data.data(), nullptr, "empty"), base::FormatError);
}

}  // namespace
