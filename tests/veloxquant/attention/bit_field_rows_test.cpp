// The variable-width field decoder against its scalar reference (bit for bit), and the reference
// against codes packed here independently, for layouts of every width 0..8, mixed, ragged field
// counts and a last row that ends its buffer exactly (the kernel's padded-copy path), on every
// SIMD target of the machine (AVX3_DL's byte-code path for rows of at most 64 bytes, with and
// without its second permute for 7- and 8-bit fields that pass a 64-bit lane).
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL, which the kernel compiles
#include <gtest/gtest.h>

#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/bit_field_rows.h"
#include "veloxquant/attention/latent_pair_tiles.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(BitFieldRows, EqualTheScalarReferenceAndThePackedCodes) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> width(0, 8);
  std::uniform_real_distribution<float> real(-3.0f, 3.0f);
  std::uniform_int_distribution<int> wide(7, 8);
  bool saw_two_pass = false;
  for (int64_t n : {1, 7, 8, 17, 64, 150, 192}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<int32_t> widths(static_cast<std::size_t>(n));
      for (auto& w : widths) w = trial == 0 ? 8 : (trial == 1 ? 3 : (trial == 4 ? wide(rng) : width(rng)));
      if (trial == 4) widths[0] = 1;  // every later field off its byte boundary
      const BitFieldLayout layout = BitFieldLayout::from_widths(widths.data(), n);
      saw_two_pass = saw_two_pass || (layout.two_pass && layout.row_bytes <= 64);
      int64_t total = 0;
      for (int32_t w : widths) total += w;
      ASSERT_EQ(layout.row_bytes, (total + 7) / 8);
      const int64_t rows = 13, stride = layout.row_bytes + (trial % 2);  // back to back or not
      // Exactly rows * stride bytes: the last row's gather would read past a smaller buffer.
      std::vector<uint8_t> packed(static_cast<std::size_t>(rows * stride), 0);
      std::vector<uint32_t> codes(static_cast<std::size_t>(rows * n));
      for (int64_t j = 0; j < rows; ++j) {
        int64_t bit = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int w = widths[static_cast<std::size_t>(i)];
          const uint32_t c = w == 0 ? 0u : static_cast<uint32_t>(rng()) & ((1u << w) - 1u);
          codes[static_cast<std::size_t>(j * n + i)] = c;
          for (int k = 0; k < w; ++k, ++bit) {
            if ((c >> k) & 1u)
              packed[static_cast<std::size_t>(j * stride + (bit >> 3))] |= static_cast<uint8_t>(1u << (bit & 7));
          }
        }
        // Bits past the last field (padding, the gap to the next row) set: they must be masked.
        for (int64_t b = bit; b < stride * 8; ++b)
          packed[static_cast<std::size_t>(j * stride + (b >> 3))] |= static_cast<uint8_t>(1u << (b & 7));
      }
      std::vector<float> step(static_cast<std::size_t>(n)), lo(static_cast<std::size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        step[static_cast<std::size_t>(i)] = std::abs(real(rng)) * 0.1f;
        lo[static_cast<std::size_t>(i)] = real(rng);
      }
      std::vector<float> plain(static_cast<std::size_t>(rows * n));
      scalar::decode_bit_field_rows(packed.data(), stride, rows, layout, step.data(), lo.data(), plain.data());
      // The integer codes (kvtc's key scores read them), padded to a multiple of 32 with zeros.
      const int64_t code_stride = (n + 31) / 32 * 32 + int64_t{trial % 2} * 32;
      std::vector<int16_t> plain_codes(static_cast<std::size_t>(rows * code_stride), -1);
      scalar::decode_bit_field_codes(packed.data(), stride, rows, layout, plain_codes.data(), code_stride);
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < code_stride; ++i) {
          ASSERT_EQ(plain_codes[static_cast<std::size_t>(j * code_stride + i)],
                    i < n ? static_cast<int16_t>(codes[static_cast<std::size_t>(j * n + i)]) : 0);
        }
      }
      for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        std::vector<int16_t> simd_codes(plain_codes.size(), -1);
        decode_bit_field_codes(packed.data(), stride, rows, layout, simd_codes.data(), code_stride);
        // The same codes as bytes (kvtc's integer value sums), padded to a multiple of 64.
        const int64_t byte_stride = (n + 63) / 64 * 64 + int64_t{trial % 2} * 64;
        std::vector<uint8_t> simd_bytes(static_cast<std::size_t>(rows * byte_stride), 0xAB);
        decode_bit_field_bytes(packed.data(), stride, rows, layout, simd_bytes.data(), byte_stride);
        std::vector<float> simd(plain.size(), -1.0f);
        decode_bit_field_rows(packed.data(), stride, rows, layout, step.data(), lo.data(), simd.data());
        hwy::SetSupportedTargetsForTest(0);
        ASSERT_EQ(simd, plain) << hwy::TargetName(target) << " n " << n << " trial " << trial;
        ASSERT_EQ(simd_codes, plain_codes) << hwy::TargetName(target) << " n " << n << " trial " << trial;
        for (int64_t j = 0; j < rows; ++j) {
          for (int64_t i = 0; i < byte_stride; ++i) {
            ASSERT_EQ(simd_bytes[static_cast<std::size_t>(j * byte_stride + i)],
                      i < n ? codes[static_cast<std::size_t>(j * n + i)] : 0u)
                << hwy::TargetName(target) << " n " << n << " trial " << trial << " row " << j << " field " << i;
          }
        }
      }
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < n; ++i) {
          const auto at = static_cast<std::size_t>(j * n + i);
          ASSERT_EQ(plain[at], std::fma(static_cast<float>(codes[at]), step[static_cast<std::size_t>(i)],
                                        lo[static_cast<std::size_t>(i)]))
              << "n " << n << " row " << j << " field " << i;
        }
      }
    }
  }
  EXPECT_TRUE(saw_two_pass);
}

// The pair-tile decode (kvtc's keys, attention/latent_pair_tiles.h) against the scalar rows laid
// out by pair_tile_from_rows, on every target: widths with and without a last partial chunk of
// 8, one and two passes of 8 rows, rows back to back and apart, 7- and 8-bit fields (the
// second permute), rows over 64 bytes (the plain decode path).
TEST(BitFieldRows, PairTileIsTheScalarRowsInPairs) {
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> width(1, 4);
  std::uniform_real_distribution<float> real(-3.0f, 3.0f);
  for (int64_t n : {5, 8, 13, 64, 150, 185, 189, 192}) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<int32_t> widths(static_cast<std::size_t>(n));
      for (auto& w : widths) w = trial == 2 ? 8 - static_cast<int>(rng() % 2) : width(rng);
      const BitFieldLayout layout = BitFieldLayout::from_widths(widths.data(), n);
      for (int64_t rows : {8, 16}) {
        const int64_t stride = layout.row_bytes + trial % 2;
        std::vector<uint8_t> packed(static_cast<std::size_t>(rows * stride));
        for (auto& b : packed) b = static_cast<uint8_t>(rng());
        std::vector<float> step(static_cast<std::size_t>(n)), lo(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          step[static_cast<std::size_t>(i)] = std::abs(real(rng)) * 0.1f;
          lo[static_cast<std::size_t>(i)] = real(rng);
        }
        std::vector<float> plain(static_cast<std::size_t>(rows * n));
        scalar::decode_bit_field_rows(packed.data(), stride, rows, layout, step.data(), lo.data(), plain.data());
        std::vector<float> want(static_cast<std::size_t>(pair_tile_floats(rows, n)));
        pair_tile_from_rows(plain.data(), n, rows, n, want.data());
        for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
          hwy::SetSupportedTargetsForTest(target);
          std::vector<float> got(want.size(), -1.0f);
          decode_bit_field_pair_tile(packed.data(), stride, rows, layout, step.data(), lo.data(), got.data());
          hwy::SetSupportedTargetsForTest(0);
          ASSERT_EQ(got, want) << hwy::TargetName(target) << " n " << n << " trial " << trial << " rows " << rows;
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
