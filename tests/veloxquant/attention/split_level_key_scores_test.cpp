// Split level keys (turboquant_block's key_split): the SIMD loop against its scalar reference
// (bit for bit) on random codes of every width 1..4 and group layout, on every SIMD target this
// machine runs (AVX3_DL's two-rows-per-vector loop, AVX3 / AVX2's 8-lane loops, ...), and both
// against exact f64 scores over the unpacked codes, levels and scales.
#define HWY_WANT_AVX3_DL  // so that the target list below names AVX3_DL, which the kernel compiles
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/split_level_key_scores.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/quant/block_lloyd_quant.h"
#include "veloxquant/quant/log8_scale.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

struct Layout {
  std::vector<int> channels, bits;
};

// Random rows in the split layout (codes per group dense, LSB first; one log8 scale per group),
// n_q random queries; checks SIMD == scalar bit for bit and both against an f64 reference.
void check_layout(const Layout& layout, int64_t n_rows, int64_t n_q, bool with_bias, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale_code(100, 200);
  SplitLevelKeys keys;
  keys.n_groups = static_cast<int>(layout.channels.size());
  int dim = 0, code_bytes = 0;
  std::vector<std::vector<float>> level_sets;
  for (int g = 0; g < keys.n_groups; ++g) {
    keys.channels[g] = layout.channels[static_cast<std::size_t>(g)];
    keys.bits[g] = layout.bits[static_cast<std::size_t>(g)];
    keys.offset[g] = dim;
    keys.code_offset[g] = code_bytes;
    dim += keys.channels[g];
    code_bytes += keys.channels[g] * keys.bits[g] / 8;
    level_sets.push_back(quant::block_levels(keys.bits[g]));
  }
  for (int g = 0; g < keys.n_groups; ++g) keys.levels[g] = level_sets[static_cast<std::size_t>(g)].data();
  // Exactly the rows' bytes (no slack): the kernel must not read past the last row.
  std::vector<uint8_t> codes(static_cast<std::size_t>(n_rows * code_bytes));
  std::vector<uint8_t> scales(static_cast<std::size_t>(n_rows * keys.n_groups));
  std::vector<uint8_t> unpacked(static_cast<std::size_t>(n_rows * dim));
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int g = 0; g < keys.n_groups; ++g) {
      std::uniform_int_distribution<int> code(0, (1 << keys.bits[g]) - 1);
      uint8_t* u = unpacked.data() + j * dim + keys.offset[g];
      for (int i = 0; i < keys.channels[g]; ++i) u[i] = static_cast<uint8_t>(code(rng));
      core::pack_dense(u, static_cast<std::size_t>(keys.channels[g]), keys.bits[g],
                       codes.data() + j * code_bytes + keys.code_offset[g]);
      scales[static_cast<std::size_t>(j * keys.n_groups + g)] = static_cast<uint8_t>(scale_code(rng));
    }
  }
  keys.codes = codes.data();
  keys.code_stride = code_bytes;
  keys.scales = scales.data();
  keys.scale_stride = keys.n_groups;
  keys.n_rows = n_rows;
  keys.scale_table = quant::log8_scale_table();
  ASSERT_TRUE(valid_split_level_keys(keys));
  const int64_t q_stride = dim + 5;  // not the row width: the kernel must use the stride
  std::vector<float> q(static_cast<std::size_t>(n_q * q_stride)), bias(static_cast<std::size_t>(n_q));
  for (float& x : q) x = normal(rng);
  for (float& x : bias) x = normal(rng);
  const int64_t ld = n_rows + 3;
  std::vector<float> got(static_cast<std::size_t>(n_q * ld), -1.0f), want = got;
  const float* b = with_bias ? bias.data() : nullptr;
  scalar::score_split_level_rows(keys, q.data(), q_stride, b, n_q, want.data(), ld);
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> on_target(got.size(), -1.0f);
    score_split_level_rows(keys, q.data(), q_stride, b, n_q, on_target.data(), ld);
    ASSERT_EQ(on_target, want) << target << ", seed " << seed;
  });
  score_split_level_rows(keys, q.data(), q_stride, b, n_q, got.data(), ld);
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      const std::size_t at = static_cast<std::size_t>(r * ld + j);
      ASSERT_EQ(got[at], want[at]) << "query " << r << ", row " << j << ", seed " << seed;
      double exact = with_bias ? bias[static_cast<std::size_t>(r)] : 0.0, energy = 0.0;
      for (int g = 0; g < keys.n_groups; ++g) {
        const double s = quant::log8_scale(scales[static_cast<std::size_t>(j * keys.n_groups + g)]);
        for (int i = 0; i < keys.channels[g]; ++i) {
          const int e = keys.offset[g] + i;
          const double level = keys.levels[g][unpacked[static_cast<std::size_t>(j * dim + e)]];
          const double term = s * level * q[static_cast<std::size_t>(r * q_stride + e)];
          exact += term;
          energy += std::fabs(term);
        }
      }
      EXPECT_NEAR(got[at], exact, 1e-5 * (energy + 1.0)) << "query " << r << ", row " << j;
    }
    // Columns past n_rows are not written.
    for (int64_t j = n_rows; j < ld; ++j) EXPECT_EQ(got[static_cast<std::size_t>(r * ld + j)], -1.0f);
  }
}

TEST(SplitLevelKeyScores, SimdEqualsScalarOnEveryWidthAndLayout) {
  const std::vector<Layout> layouts = {{{32, 16, 16}, {4, 3, 2}},  // the q3 candidate
                                       {{32, 32}, {4, 3}},
                                       {{24, 40}, {4, 3}},
                                       {{16, 16, 32}, {4, 3, 2}},
                                       {{8, 8, 16, 32}, {1, 2, 3, 4}},
                                       {{64}, {3}},
                                       {{128}, {4}},
                                       {{64, 64}, {2, 1}}};
  uint64_t seed = 1;
  for (const Layout& layout : layouts) {
    for (int64_t n_q : {1, 2, 3, 4, 5, 7}) {
      for (int64_t n_rows : {1, 5, 64}) {
        check_layout(layout, n_rows, n_q, (seed & 1) == 0, seed);
        ++seed;
      }
    }
  }
}

TEST(SplitLevelKeyScores, InvalidShapesAreRefused) {
  SplitLevelKeys keys;
  const std::vector<float>& levels = quant::block_levels(3);
  keys.n_groups = 1;
  keys.channels[0] = 12;  // not a multiple of 8
  keys.bits[0] = 3;
  keys.levels[0] = levels.data();
  keys.scale_table = quant::log8_scale_table();
  EXPECT_FALSE(valid_split_level_keys(keys));
  keys.channels[0] = 16;
  EXPECT_TRUE(valid_split_level_keys(keys));
  keys.bits[0] = 5;
  EXPECT_FALSE(valid_split_level_keys(keys));
  keys.bits[0] = 3;
  keys.n_groups = 5;
  EXPECT_FALSE(valid_split_level_keys(keys));
}

TEST(Log8Scale, GridIsLogarithmicAndNearestRoundsInTheLogDomain) {
  EXPECT_EQ(quant::log8_scale(0), 0.0f);
  EXPECT_EQ(quant::log8_scale(quant::kLog8Bias), 1.0f);
  EXPECT_EQ(quant::log8_scale(quant::kLog8Bias + 16), 2.0f);
  EXPECT_EQ(quant::nearest_log8(1.0f), quant::kLog8Bias);
  EXPECT_EQ(quant::nearest_log8(0.0f), 0);
  EXPECT_EQ(quant::nearest_log8(-1.0f), 0);
  EXPECT_EQ(quant::nearest_log8(1e9f), 255);  // saturates
  EXPECT_EQ(quant::nearest_log8(1e-9f), 1);   // smallest nonzero
  for (int n = 2; n < 256; ++n) {
    const double ratio = quant::log8_scale(static_cast<uint8_t>(n)) / quant::log8_scale(static_cast<uint8_t>(n - 1));
    EXPECT_NEAR(ratio, std::exp2(1.0 / 16), 2e-3) << n;
    EXPECT_EQ(quant::nearest_log8(quant::log8_scale(static_cast<uint8_t>(n))), n);
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
