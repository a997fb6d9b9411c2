// The split-level row decoder (prefill tiles of turboquant_block's split keys and log8 value
// blocks): the SIMD loop against its scalar reference bit for bit, on random codes of every width
// 1..4, group layouts with 16-lane vectors and half vectors, with and without an offset, on every
// SIMD target this machine runs (AVX3's 16 lanes, AVX2's 8, SSE4's scalar fallback); both against
// the floats computed from the unpacked codes; and against SplitKeyCoder::decode + the mean, the
// per-row decode the tiles used before.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/split_level_rows.h"
#include "veloxquant/caches/turboquant_block_split_keys.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/quant/block_lloyd_quant.h"
#include "veloxquant/quant/log8_scale.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

struct Layout {
  std::vector<int> channels, bits;
  std::vector<int> order;  // group g's coordinates start after those of the groups before it here
};

void check_layout(const Layout& layout, int64_t n_rows, bool with_offset, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale_code(0, 255);
  SplitLevelKeys rows;
  rows.n_groups = static_cast<int>(layout.channels.size());
  int dim = 0, code_bytes = 0;
  std::vector<std::vector<float>> level_sets;
  for (int g = 0; g < rows.n_groups; ++g) {
    rows.channels[g] = layout.channels[static_cast<std::size_t>(g)];
    rows.bits[g] = layout.bits[static_cast<std::size_t>(g)];
    rows.code_offset[g] = code_bytes;
    dim += rows.channels[g];
    code_bytes += rows.channels[g] * rows.bits[g] / 8;
    level_sets.push_back(quant::block_levels(rows.bits[g]));
  }
  for (int at = 0, i = 0; i < rows.n_groups; ++i) {
    const int g = layout.order.empty() ? i : layout.order[static_cast<std::size_t>(i)];
    rows.offset[g] = at;
    at += rows.channels[g];
  }
  for (int g = 0; g < rows.n_groups; ++g) rows.levels[g] = level_sets[static_cast<std::size_t>(g)].data();
  // Exactly the rows' bytes (no slack): the decoder must not read past the last row.
  std::vector<uint8_t> codes(static_cast<std::size_t>(n_rows * code_bytes));
  std::vector<uint8_t> scales(static_cast<std::size_t>(n_rows * rows.n_groups));
  std::vector<uint8_t> unpacked(static_cast<std::size_t>(n_rows * dim));
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int g = 0; g < rows.n_groups; ++g) {
      std::uniform_int_distribution<int> code(0, (1 << rows.bits[g]) - 1);
      uint8_t* u = unpacked.data() + j * dim + rows.offset[g];
      for (int i = 0; i < rows.channels[g]; ++i) u[i] = static_cast<uint8_t>(code(rng));
      core::pack_dense(u, static_cast<std::size_t>(rows.channels[g]), rows.bits[g],
                       codes.data() + j * code_bytes + rows.code_offset[g]);
      scales[static_cast<std::size_t>(j * rows.n_groups + g)] = static_cast<uint8_t>(scale_code(rng));
    }
  }
  rows.codes = codes.data();
  rows.code_stride = code_bytes;
  rows.scales = scales.data();
  rows.scale_stride = rows.n_groups;
  rows.n_rows = n_rows;
  rows.scale_table = quant::log8_scale_table();
  ASSERT_TRUE(valid_split_level_rows(rows));
  ASSERT_EQ(split_level_row_dim(rows), dim);
  std::vector<float> offset(static_cast<std::size_t>(dim));
  for (float& x : offset) x = normal(rng);
  const float* off = with_offset ? offset.data() : nullptr;

  // The floats from the unpacked codes: the product rounded, then the offset added.
  std::vector<float> exact(static_cast<std::size_t>(n_rows * dim));
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int g = 0; g < rows.n_groups; ++g) {
      const float s = quant::log8_scale(scales[static_cast<std::size_t>(j * rows.n_groups + g)]);
      for (int i = 0; i < rows.channels[g]; ++i) {
        const std::size_t e = static_cast<std::size_t>(rows.offset[g]) + static_cast<std::size_t>(i);
        const float product = s * rows.levels[g][unpacked[static_cast<std::size_t>(j * dim) + e]];
        exact[static_cast<std::size_t>(j * dim) + e] = with_offset ? product + offset[e] : product;
      }
    }
  }
  std::vector<float> want(exact.size(), -7.0f);
  scalar::decode_split_level_rows(rows, off, want.data());
  ASSERT_EQ(want, exact) << "scalar reference, seed " << seed;
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> got(exact.size(), -7.0f);
    decode_split_level_rows(rows, off, got.data());
    ASSERT_EQ(got, want) << target << ", seed " << seed;
  });
  std::vector<float> got(exact.size(), -7.0f);
  decode_split_level_rows(rows, off, got.data());
  ASSERT_EQ(got, want) << "best target, seed " << seed;
}

TEST(SplitLevelRows, SimdEqualsScalarOnEveryWidthAndLayout) {
  const std::vector<Layout> layouts = {{{32, 32}, {4, 3}, {}},  // q3's keys
                                       {{64}, {3}, {}},         // q3's values: one block of 64
                                       {{32, 16, 16}, {4, 3, 2}, {}},
                                       {{24, 40}, {4, 3}, {}},  // half vectors at 16 lanes
                                       {{8, 8, 16, 32}, {1, 2, 3, 4}, {}},
                                       {{128}, {4}, {}},
                                       {{64, 64}, {2, 1}, {}},
                                       {{64, 64, 64, 64}, {3, 3, 3, 3}, {}},  // 4 value blocks
                                       {{40, 24}, {3, 4}, {1, 0}}};           // coordinates not in code order
  uint64_t seed = 1;
  for (const Layout& layout : layouts) {
    for (int64_t n_rows : {1, 2, 5, 64}) {
      for (const bool with_offset : {false, true}) check_layout(layout, n_rows, with_offset, seed++);
    }
  }
}

TEST(SplitLevelRows, LayoutsThatDoNotTileTheRowAreRefused) {
  const std::vector<float>& levels = quant::block_levels(3);
  SplitLevelKeys rows;
  rows.n_groups = 2;
  rows.scale_table = quant::log8_scale_table();
  for (int g = 0; g < 2; ++g) {
    rows.channels[g] = 16;
    rows.bits[g] = 3;
    rows.levels[g] = levels.data();
    rows.code_offset[g] = 6 * g;
  }
  rows.offset[0] = 0;
  rows.offset[1] = 16;
  EXPECT_TRUE(valid_split_level_rows(rows));
  rows.offset[1] = 8;  // overlaps group 0
  EXPECT_FALSE(valid_split_level_rows(rows));
  rows.offset[1] = 24;  // leaves a gap
  EXPECT_FALSE(valid_split_level_rows(rows));
  rows.offset[1] = 16;
  rows.channels[1] = 12;  // not whole 8-code chunks
  EXPECT_FALSE(valid_split_level_rows(rows));
}

TEST(SplitLevelRows, EqualsSplitKeyCodersRowDecodeWithTheMeanAdded) {
  // q3's split (32 channels at 4 bits, 32 at 3) on coded Gaussian rows: the decoder with the
  // mean as its offset gives the floats SplitKeyCoder::decode + the mean gave row by row.
  const SplitKeyCoder coder(parse_key_split("32:4,32:3"), 64, 11);
  const int64_t n_rows = 37;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> codes(static_cast<std::size_t>(n_rows * coder.code_bytes()));
  std::vector<uint8_t> scales(static_cast<std::size_t>(n_rows * coder.groups()));
  std::vector<float> mean(64), want(static_cast<std::size_t>(n_rows * 64));
  for (float& x : mean) x = normal(rng);
  for (int64_t j = 0; j < n_rows; ++j) {
    std::vector<float> y(64);
    for (float& x : y) x = 3.0f * normal(rng);
    coder.encode(y.data(), codes.data() + j * coder.code_bytes(), scales.data() + j * coder.groups());
    float* row = want.data() + j * 64;
    coder.decode(codes.data() + j * coder.code_bytes(), scales.data() + j * coder.groups(), row);
    for (int e = 0; e < 64; ++e) row[e] += mean[static_cast<std::size_t>(e)];
  }
  SplitLevelKeys rows;
  rows.n_groups = coder.groups();
  for (int g = 0; g < coder.groups(); ++g) {
    rows.channels[g] = coder.group(g).channels;
    rows.bits[g] = coder.group(g).bits;
    rows.offset[g] = coder.offset(g);
    rows.code_offset[g] = coder.code_offset(g);
    rows.levels[g] = coder.quantizer(g).levels().data();
  }
  rows.codes = codes.data();
  rows.code_stride = coder.code_bytes();
  rows.scales = scales.data();
  rows.scale_stride = coder.groups();
  rows.n_rows = n_rows;
  rows.scale_table = quant::log8_scale_table();
  std::vector<float> got(want.size(), -7.0f);
  decode_split_level_rows(rows, mean.data(), got.data());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace veloxquant::attention::kernels
