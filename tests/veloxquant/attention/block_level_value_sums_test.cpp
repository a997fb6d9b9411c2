// Block-scaled level values accumulated from their codes: the SIMD loop against its scalar
// reference (bit for bit, on every SIMD target this machine runs), and both against f64 sums over
// the decoded rows.
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL, which the kernels compile
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/half.h"
#include "support/random_values.h"

#include "veloxquant/attention/block_level_value_sums.h"
#include "veloxquant/quant/block_lloyd_quant.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

using test_support::random_bytes;

TEST(BlockLevelValueSums, ShapesTheLoopTakes) {
  EXPECT_TRUE(can_accumulate_block_level_rows(3, 64, 32));
  EXPECT_TRUE(can_accumulate_block_level_rows(6, 128, 64));
  EXPECT_TRUE(can_accumulate_block_level_rows(1, 32, 32));
  EXPECT_TRUE(can_accumulate_block_level_rows(8, 64, 32));   // even levels, computed from the code
  EXPECT_FALSE(can_accumulate_block_level_rows(7, 64, 32));  // neither a table nor whole bytes
  EXPECT_FALSE(can_accumulate_block_level_rows(4, 80, 32));  // a partial block
  EXPECT_FALSE(can_accumulate_block_level_rows(0, 64, 32));
}

struct Shape {
  int bits;
  int64_t dim, block;
  bool uniform = false;  // evenly spaced levels: codes widened as they are, no table
};

// One (rows, queries, offset) case: the SIMD loop on every target this machine runs and through
// the dispatcher equal to the scalar reference bit for bit, the accumulators past the row untouched,
// and the sums near f64 ones over the decoded rows.
void check_value_sums(const Shape& s, const std::vector<float>& levels, const std::vector<uint16_t>& levels_f16,
                      int64_t n_rows, int64_t n_q, bool with_offset) {
  const int64_t nb = s.dim / s.block;
  // Rows as tightly packed as the cache stores them: the last row ends the buffer.
  const int64_t stride = (s.dim * s.bits + 7) / 8, ld = n_rows + 3, acc_stride = s.dim + 8;
  const auto codes = random_bytes(static_cast<std::size_t>(n_rows * stride), 21);
  const auto scale_values = test_support::normal_values(static_cast<std::size_t>(n_rows * nb), 22);
  std::vector<uint16_t> scales;
  scales.reserve(scale_values.size());
  for (float x : scale_values) scales.push_back(base::f32_to_f16(0.05f + std::fabs(x)));
  auto weights = test_support::normal_values(static_cast<std::size_t>(n_q * ld), 23);
  for (float& w : weights) w = std::fabs(w);
  const auto start = test_support::normal_values(static_cast<std::size_t>(n_q * acc_stride), 24);
  BlockLevelValues values;
  values.codes = codes.data();
  values.code_stride = stride;
  values.scales = scales.data();
  values.n_rows = n_rows;
  values.dim = s.dim;
  values.bits = s.bits;
  values.block = s.block;
  values.levels_f16 = levels_f16.data();
  values.even_levels = s.uniform || s.bits == 8;
  // A shared row (the rotated value mean) added with each query's weight total.
  const auto offset = test_support::normal_values(static_cast<std::size_t>(s.dim), 25);
  if (with_offset) values.offset = offset.data();
  std::vector<float> out = start, ref = start;
  scalar::accumulate_block_level_rows(values, weights.data(), ld, n_q, ref.data(), acc_stride);
  // Every SIMD target this machine runs (AVX3_DL's multishift loop, AVX3 / AVX2's 8-lane
  // loops, ...), bit for bit.
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> on_target = start;
    accumulate_block_level_rows(values, weights.data(), ld, n_q, on_target.data(), acc_stride);
    ASSERT_EQ(on_target, ref) << target << ", " << s.bits << " bits, dim " << s.dim << ", block " << s.block << ", "
                              << n_rows << " rows, " << n_q << " queries";
  });
  accumulate_block_level_rows(values, weights.data(), ld, n_q, out.data(), acc_stride);
  ASSERT_EQ(out, ref) << s.bits << " bits, dim " << s.dim << ", block " << s.block << ", " << n_rows << " rows, " << n_q
                      << " queries" << (with_offset ? ", offset" : "");
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t e = 0; e < acc_stride; ++e) {
      const std::size_t at = static_cast<std::size_t>(r * acc_stride + e);
      if (e >= s.dim) {
        EXPECT_EQ(ref[at], start[at]);  // past the row: untouched
        continue;
      }
      double exact = start[at], magnitude = std::fabs(start[at]);
      for (int64_t j = 0; j < n_rows; ++j) {
        int code = 0;
        for (int k = 0; k < s.bits; ++k) {
          const int64_t bit = e * s.bits + k;
          code |= ((codes[static_cast<std::size_t>(j * stride + bit / 8)] >> (bit % 8)) & 1) << k;
        }
        const double term = double(weights[static_cast<std::size_t>(r * ld + j)]) *
                            base::f16_to_f32(scales[static_cast<std::size_t>(j * nb + e / s.block)]) *
                            levels[static_cast<std::size_t>(code)];
        exact += term;
        magnitude += std::fabs(term);
      }
      if (with_offset) {
        double total = 0.0;
        for (int64_t j = 0; j < n_rows; ++j) total += weights[static_cast<std::size_t>(r * ld + j)];
        exact += total * offset[static_cast<std::size_t>(e)];
        magnitude += std::fabs(total * offset[static_cast<std::size_t>(e)]);
      }
      EXPECT_NEAR(ref[at], exact, 1e-6 * magnitude * static_cast<double>(n_rows + 1));
    }
  }
}

TEST(BlockLevelValueSums, MatchesScalarBitForBitAndDecodedRowsInF64) {
  const Shape shapes[] = {{1, 32, 32},
                          {2, 64, 32},
                          {3, 64, 32},
                          {3, 64, 64},
                          {4, 64, 32},
                          {5, 64, 32},
                          {6, 64, 32},
                          {4, 128, 128},
                          {5, 96, 32},
                          {3, 256, 64},
                          {8, 64, 32},
                          {8, 128, 64},
                          // 1-4 bits on Lloyd levels take the lane-permute loop (levels in one
                          // register, two at 4 bits; weights times scales made once per tile): 1..4
                          // blocks a row.
                          {3, 128, 32},
                          {4, 128, 32},
                          {4, 32, 32},
                          {2, 128, 128},
                          {1, 96, 32},
                          // Head size 64 in blocks of 32 or 64: the 512-bit loops on AVX-512 VBMI.
                          {1, 64, 32},
                          {2, 64, 64},
                          {3, 64, 32},
                          {8, 64, 64},
                          {3, 32, 32},
                          // AVX-512 VBMI: 16 codes per multishift, passes of 64 coordinates; the
                          // smallest row it takes (8 code bytes: the last chunk's load is the
                          // row), one block per pass and two.
                          {1, 64, 64},
                          {1, 128, 32},
                          {2, 64, 64},
                          {1, 32, 32, true},
                          {2, 64, 32, true},
                          {3, 64, 32, true},
                          {3, 64, 64, true},
                          {4, 64, 32, true},
                          {5, 64, 32, true},
                          {6, 64, 32, true},
                          {4, 128, 128, true},
                          {5, 96, 32, true},
                          {3, 256, 64, true}};
  for (const Shape& s : shapes) {
    ASSERT_TRUE(can_accumulate_block_level_rows(s.bits, s.dim, s.block)) << s.bits << " " << s.dim;
    const std::vector<float>& levels = quant::block_levels(
        s.bits, static_cast<int>(s.block),
        s.uniform ? quant::BlockLloydQuantizer::Levels::kUniform : quant::BlockLloydQuantizer::Levels::kLloyd);
    std::vector<uint16_t> levels_f16;
    levels_f16.reserve(levels.size());
    for (float l : levels) levels_f16.push_back(base::f32_to_f16(l));
    for (const int64_t n_rows : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{64}}) {
      for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{4}}) {
        for (const bool with_offset : {false, true}) {
          check_value_sums(s, levels, levels_f16, n_rows, n_q, with_offset);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
