// Product VQ's SIMD lookup tables (caches/product_vq_lut.h) against their scalar references, bit
// for bit, on every SIMD target this machine runs: the table build over a transposed book (entry
// counts that do and do not fill whole vectors, the sub-vector widths the caches use) and the
// gathered scores of 4 x 8-bit code rows (row counts with a scalar tail, several queries).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "veloxquant/caches/product_vq_lut.h"
#include "support/simd_targets.h"

namespace veloxquant::pvq {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ProductVqLut, TableFromColumnsMatchesScalarOnEveryTarget) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t entries : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{37}, int64_t{256}, int64_t{4096}}) {
    for (const int sub : {1, 4, 8, 16}) {
      std::vector<float> columns(static_cast<std::size_t>(entries * sub)), q(static_cast<std::size_t>(sub));
      for (float& v : columns) v = normal(rng);
      for (float& v : q) v = normal(rng);
      if (sub > 1) q[1] = -0.0f;  // a signed zero term: both sides add it the same way
      std::vector<float> want(static_cast<std::size_t>(entries)), got(want.size());
      scalar::lut_from_columns(columns.data(), entries, sub, q.data(), want.data());
      test_support::for_each_simd_target([&](const char* target) {
        std::fill(got.begin(), got.end(), -1.0f);
        lut_from_columns(columns.data(), entries, sub, q.data(), got.data());
        ASSERT_TRUE(same_bits(got, want)) << target << " entries " << entries << " sub " << sub;
      });
      // And the table is the dot product it stands for (to float rounding).
      for (int64_t k = 0; k < entries; k += 5) {
        double dot = 0.0;
        for (int e = 0; e < sub; ++e)
          dot += double{q[static_cast<std::size_t>(e)]} * columns[static_cast<std::size_t>(e * entries + k)];
        ASSERT_NEAR(want[static_cast<std::size_t>(k)], dot, 1e-4 * (1.0 + std::abs(dot)));
      }
    }
  }
}

TEST(ProductVqLut, GatheredScoresMatchScalarOnEveryTarget) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (const int64_t n_rows : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{64}, int64_t{77}}) {
    for (const int64_t n_q : {int64_t{1}, int64_t{3}}) {
      const int64_t lut_stride = 1024 + 40;  // tables inside a longer prepared-query row
      std::vector<float> luts(static_cast<std::size_t>(n_q * lut_stride));
      for (float& v : luts) v = normal(rng);
      std::vector<uint8_t> codes(static_cast<std::size_t>(4 * n_rows));
      for (uint8_t& c : codes) c = static_cast<uint8_t>(byte(rng));
      if (n_rows > 3) std::fill(codes.begin(), codes.begin() + 4, uint8_t{255});  // every code at the top entry
      const int64_t ld = n_rows + 3;
      std::vector<float> want(static_cast<std::size_t>(n_q * ld), 0.0f), got(want.size(), 0.0f);
      scalar::score_lut_rows_4x8(codes.data(), n_rows, luts.data(), lut_stride, n_q, want.data(), ld);
      for (int64_t r = 0; r < n_q; ++r) {  // the reference is the table sum in code order
        for (int64_t j = 0; j < n_rows; ++j) {
          float s = 0.0f;
          for (int t = 0; t < 4; ++t)
            s += luts[static_cast<std::size_t>(r * lut_stride + int64_t{t} * 256 +
                                               codes[static_cast<std::size_t>(4 * j + t)])];
          ASSERT_EQ(want[static_cast<std::size_t>(r * ld + j)], s);
        }
      }
      test_support::for_each_simd_target([&](const char* target) {
        std::fill(got.begin(), got.end(), 0.0f);
        score_lut_rows_4x8(codes.data(), n_rows, luts.data(), lut_stride, n_q, got.data(), ld);
        ASSERT_TRUE(same_bits(got, want)) << target << " rows " << n_rows << " queries " << n_q;
      });
    }
  }
}

}  // namespace
}  // namespace veloxquant::pvq
