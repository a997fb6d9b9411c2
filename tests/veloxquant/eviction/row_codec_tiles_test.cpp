// A tile of kivi-style (group-affine, packed-word) eviction rows decoded in one call
// (RowCodec::decode_rows, attention/affine_word_rows) against the codec's own row-by-row decode
// and the kernel's scalar reference, for every code width, group size and a row stride wider
// than a row (the eviction store's rows sit back to back, but the kernel must not assume it).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hwy/targets.h"

#include "support/random_values.h"

#include "veloxquant/attention/affine_word_rows.h"
#include "veloxquant/eviction/row_codec.h"

namespace veloxquant::eviction {
namespace {

// One codec at one row stride (row bytes + extra): the tile decode against the row-by-row
// decode and against the kernel's scalar reference.
void check_tile_decode(const RowCodec& codec, int bits, int dim, int group, int64_t extra) {
  const int64_t stride = static_cast<int64_t>(codec.row_bytes()) + extra;
  const int64_t rows = 13;
  std::vector<std::byte> store(static_cast<std::size_t>(rows * stride), std::byte{0x5a});
  for (int64_t j = 0; j < rows; ++j) {
    const auto x = test_support::normal_values(static_cast<std::size_t>(dim), static_cast<uint32_t>(100 + j + bits));
    codec.encode(x.data(), store.data() + j * stride);
  }
  std::vector<float> tile(static_cast<std::size_t>(rows * dim)), row(static_cast<std::size_t>(dim));
  codec.decode_rows(store.data(), stride, rows, dim, tile.data());
  for (int64_t j = 0; j < rows; ++j) {
    codec.decode(store.data() + j * stride, row.data());
    for (int e = 0; e < dim; ++e) {
      // A fused multiply-add against a multiply then an add: one rounding apart.
      const float want = row[static_cast<std::size_t>(e)];
      ASSERT_NEAR(tile[static_cast<std::size_t>(j * dim + e)], want, 1e-6f * (1.0f + std::fabs(want)))
          << "bits " << bits << " dim " << dim << " group " << group << " row " << j << " e " << e;
    }
  }
  // The kernel's scalar reference reads the same bytes the same way.
  attention::kernels::AffineWordRows r;
  r.first_row = store.data();
  r.row_bytes = stride;
  r.params_offset = static_cast<int64_t>(codec.row_bytes()) - int64_t{4} * ((dim + group - 1) / group);
  r.n_rows = rows;
  r.dim = dim;
  r.bits = bits;
  r.group = group;
  std::vector<float> ref(tile.size());
  attention::kernels::scalar::decode_affine_word_rows(r, ref.data());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(tile[i], ref[i], 1e-6f * (1.0f + std::fabs(ref[i]))) << "bits " << bits << " i " << i;
  }
}

TEST(RowCodecTiles, GroupAffineTileDecodeEqualsRowByRowDecode) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (int dim : {8, 64, 96, 128}) {
      for (int group : {8, 32, 64}) {
        if (dim % group != 0 && group > dim) continue;
        const auto codec = make_group_affine_codec(dim, bits, group);
        for (int64_t extra : {0, 6}) ASSERT_NO_FATAL_FAILURE(check_tile_decode(*codec, bits, dim, group, extra));
      }
    }
  }
}

// Every compiled SIMD target (16-lane AVX-512, 8-lane AVX2, ...) decodes the same bytes to the same
// floats bit for bit: each is one fused multiply-add of the same code, scale and min, whatever the
// vector width (on an AVX-512 machine the 8-lane 2-bit word path runs only here).
void check_targets_agree(int bits, int dim, int group) {
  const auto codec = make_group_affine_codec(dim, bits, group);
  const int64_t stride = static_cast<int64_t>(codec->row_bytes()), rows = 11;
  std::vector<std::byte> store(static_cast<std::size_t>(rows * stride));
  for (int64_t j = 0; j < rows; ++j) {
    const auto x = test_support::normal_values(static_cast<std::size_t>(dim), static_cast<uint32_t>(700 + j));
    codec->encode(x.data(), store.data() + j * stride);
  }
  attention::kernels::AffineWordRows r;
  r.first_row = store.data();
  r.row_bytes = stride;
  r.params_offset = stride - int64_t{4} * (dim / group);
  r.n_rows = rows;
  r.dim = dim;
  r.bits = bits;
  r.group = group;
  std::vector<float> first, got(static_cast<std::size_t>(rows * dim));
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    attention::kernels::decode_affine_word_rows(r, got.data());
    if (first.empty()) {
      first = got;
      continue;
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(first[i]))
          << hwy::TargetName(target) << " bits " << bits << " dim " << dim << " group " << group << " i " << i;
    }
  }
}

TEST(RowCodecTiles, EveryTargetDecodesTheSameFloats) {
  for (int bits : {2, 4, 8}) {
    for (int dim : {64, 96, 128}) {
      for (int group : {16, 32, 64}) {
        if (dim % group == 0) ASSERT_NO_FATAL_FAILURE(check_targets_agree(bits, dim, group));
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace veloxquant::eviction
