// amc's coordinate-major latent decode (caches/amc_latent_columns.h): every compiled target gives
// the scalar reference's floats bit for bit, and the reference is code * scale + min with the
// product rounded before the sum.
#include <gtest/gtest.h>

#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/caches/amc_latent_columns.h"
#include "support/simd_targets.h"

namespace veloxquant {
namespace {

// n rows of r random codes (`extra` bytes apart past their own) with random (scale, offset)
// pairs: the scalar reference equals code * scale + offset rounded once each, and every target
// equals the reference bit for bit.
void check_columns(int bits, int64_t r, int64_t row_bytes, int64_t extra, int64_t n, std::mt19937& rng,
                   std::uniform_int_distribution<int>& byte, std::normal_distribution<float>& normal) {
  const int64_t stride = row_bytes + extra;
  // Exactly the rows' bytes: a read past the last one would leave the buffer.
  std::vector<uint8_t> rows(static_cast<std::size_t>(n * stride));
  for (uint8_t& b : rows) b = static_cast<uint8_t>(byte(rng));
  std::vector<float> pairs(static_cast<std::size_t>(2 * n));
  for (float& p : pairs) p = normal(rng) * 0.37f;
  std::vector<float> plain(static_cast<std::size_t>(r * n), -1.0f);
  scalar::amc_latent_columns(rows.data(), stride, n, r, bits, pairs.data(), plain.data());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < r; ++i) {
      const uint8_t* row = rows.data() + j * stride;
      const int code = bits == 8 ? row[i] : (row[i >> 1] >> ((i & 1) * 4)) & 15;
      const volatile float product = static_cast<float>(code) * pairs[static_cast<std::size_t>(2 * j)];
      ASSERT_EQ(plain[static_cast<std::size_t>(i * n + j)], product + pairs[static_cast<std::size_t>(2 * j + 1)]);
    }
  }
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> simd(plain.size(), -2.0f);
    amc_latent_columns(rows.data(), stride, n, r, bits, pairs.data(), simd.data());
    ASSERT_EQ(simd, plain) << target << " bits " << bits << " r " << r << " n " << n;
  });
}

TEST(AmcLatentColumns, EveryTargetMatchesTheScalarReferenceBitForBit) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int bits : {8, 4}) {
    for (const int64_t r : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{22}, int64_t{43}}) {
      const int64_t row_bytes = (r * bits + 7) / 8;
      for (const int64_t extra : {int64_t{0}, int64_t{5}}) {
        for (const int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{64}}) {
          check_columns(bits, r, row_bytes, extra, n, rng, byte, normal);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant
