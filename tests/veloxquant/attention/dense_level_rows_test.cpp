// The tile decoder of block-scaled Lloyd-Max rows against its scalar reference, and the
// reference itself against codes packed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <vector>

#include "support/random_values.h"

#include "base/half.h"
#include "veloxquant/attention/dense_level_rows.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant::attention::kernels {
namespace {

struct Tile {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> raw;  // the unpacked codes, row-major [rows, dim]
};

// `rows` rows of `dim` codes, each row's packed codes `code_stride` bytes apart. The buffer ends
// exactly at the last row's last code byte, so a kernel reading past it reads past the vector.
Tile make_tile(int64_t rows, int64_t dim, int bits, int64_t block, int64_t code_stride, int64_t scale_stride) {
  Tile t;
  const int64_t row_bytes = (dim * bits + 7) / 8;
  t.codes.assign(static_cast<std::size_t>((rows - 1) * code_stride + row_bytes), 0xA5);
  t.scales.assign(static_cast<std::size_t>(rows * scale_stride), 0);
  t.raw.resize(static_cast<std::size_t>(rows * dim));
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t i = 0; i < dim; ++i) {
      t.raw[static_cast<std::size_t>(j * dim + i)] = static_cast<uint8_t>((i * 37 + j * 11 + 5) % (1 << bits));
    }
    core::pack_dense(t.raw.data() + j * dim, static_cast<std::size_t>(dim), bits, t.codes.data() + j * code_stride);
    for (int64_t b = 0; b < (dim + block - 1) / block; ++b) {
      t.scales[static_cast<std::size_t>(j * scale_stride + b)] =
          base::f32_to_f16(0.5f + 0.25f * static_cast<float>(b + j));
    }
  }
  return t;
}

TEST(DenseLevelRows, ScalarReferenceDecodesHandPackedCodes) {
  const int bits = 3, dim = 16, block = 8;
  const auto levels = test_support::normal_values(8, 1);
  const Tile t = make_tile(2, dim, bits, block, 7, 3);
  const std::vector<float> offset = test_support::normal_values(dim, 2);
  DenseLevelRows r;
  r.codes = t.codes.data();
  r.code_stride = 7;
  r.scales = t.scales.data();
  r.scale_stride = 3;
  r.n_rows = 2;
  r.dim = dim;
  r.bits = bits;
  r.block = block;
  r.levels = levels.data();
  r.offset = offset.data();
  std::vector<float> out(2 * static_cast<std::size_t>(dim));
  scalar::decode_dense_level_rows(r, out.data());
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < dim; ++i) {
      const float s = base::f16_to_f32(t.scales[static_cast<std::size_t>(j) * 3 + i / block]);
      EXPECT_FLOAT_EQ(out[static_cast<std::size_t>(j * dim + i)],
                      s * levels[t.raw[static_cast<std::size_t>(j * dim + i)]] + offset[static_cast<std::size_t>(i)]);
    }
  }
}

// One shape: `rows` rows `gap` bytes/scales apart (0: contiguous, the caches' layout), with and
// without the offset, the dispatched decoder against the scalar reference, one FMA rounding apart
// at most (a fused multiply-add against a multiply then an add).
void expect_shape_matches_scalar(int bits, const std::vector<float>& levels, int64_t dim, int64_t block, int64_t rows,
                                 int64_t gap) {
  const int64_t row_bytes = (dim * bits + 7) / 8;
  const int64_t blocks = (dim + block - 1) / block;
  const Tile t = make_tile(rows, dim, bits, block, row_bytes + gap, blocks + gap);
  const auto offset = test_support::normal_values(static_cast<std::size_t>(dim), 9);
  DenseLevelRows r;
  r.codes = t.codes.data();
  r.code_stride = row_bytes + gap;
  r.scales = t.scales.data();
  r.scale_stride = blocks + gap;
  r.n_rows = rows;
  r.dim = dim;
  r.bits = bits;
  r.block = block;
  r.levels = levels.data();
  for (bool with_offset : {false, true}) {
    r.offset = with_offset ? offset.data() : nullptr;
    std::vector<float> out(static_cast<std::size_t>(rows * dim)), ref(out.size());
    decode_dense_level_rows(r, out.data());
    scalar::decode_dense_level_rows(r, ref.data());
    for (std::size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], ref[i], 1e-6f * (1.0f + std::fabs(ref[i])))
          << "bits " << bits << " dim " << dim << " block " << block << " rows " << rows << " gap " << gap << " i " << i
          << (with_offset ? " offset" : "");
    }
  }
}

// expect_shape_matches_scalar for every combination of the lists.
void expect_simd_matches_scalar(int bits, const std::vector<float>& levels, std::initializer_list<int64_t> dims,
                                std::initializer_list<int64_t> blocks_list, std::initializer_list<int64_t> rows_list,
                                std::initializer_list<int64_t> gaps) {
  for (int64_t dim : dims) {
    for (int64_t block : blocks_list) {
      for (int64_t rows : rows_list) {
        for (int64_t gap : gaps) {
          expect_shape_matches_scalar(bits, levels, dim, block, rows, gap);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(DenseLevelRows, SimdMatchesScalarForEveryWidthStrideAndTail) {
  // Levels that are not f16 values: the f32-table path (or the scalar loop for odd shapes).
  for (int bits = 1; bits <= 8; ++bits) {
    expect_simd_matches_scalar(bits, test_support::normal_values(std::size_t{1} << bits, 30 + bits),
                               {7, 8, 64, 100, 128}, {8, 32, 5}, {1, 3, 17}, {0, 3});
  }
}

TEST(DenseLevelRows, F16TablePathMatchesScalarForEveryWidthBlockAndTail) {
  // Levels that are exact f16 values (as turboquant_block's are) take the byte-shuffle path for
  // 1..6 bits when dim and block are whole passes of 16 codes; the rest falls back. 64-row tiles
  // include last rows whose 16-byte pass loads would cross the tile's end (the padded copy).
  for (int bits = 1; bits <= 8; ++bits) {
    auto levels = test_support::normal_values(std::size_t{1} << bits, 50 + bits);
    for (float& l : levels) l = base::f16_to_f32(base::f32_to_f16(l));
    expect_simd_matches_scalar(bits, levels, {16, 48, 64, 128, 40}, {16, 32, 64, 24}, {1, 2, 5, 64}, {0, 5});
  }
}

TEST(DenseLevelRows, EvenByteLevelsComputedFromTheCodeMatchScalar) {
  // 8-bit codes on the levels (2c - 255) / 256 (turboquant_block from 7 bits on) take the path
  // that computes each level from its code; dims and blocks that are not whole blocks fall back.
  std::vector<float> levels;
  levels.reserve(256);
  for (int c = 0; c < 256; ++c) levels.push_back(static_cast<float>(2 * c - 255) / 256.0f);
  expect_simd_matches_scalar(8, levels, {8, 64, 128, 40}, {8, 32, 64}, {1, 3, 64}, {0, 5});
}

}  // namespace
}  // namespace veloxquant::attention::kernels
