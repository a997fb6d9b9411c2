// The variable-width field decoder against its scalar reference (bit for bit), and the reference
// against codes packed here independently, for layouts of every width 0..8, mixed, ragged field
// counts and a last row that ends its buffer exactly (the kernel's padded-copy path), on every
// SIMD target of the machine (AVX3_DL's byte-code path for rows of at most 64 bytes, with and
// without its second permute for 7- and 8-bit fields that pass a 64-bit lane).
#define HWY_WANT_AVX3_DL  // so that the target list names AVX3_DL, which the kernel compiles
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/bit_field_rows.h"
#include "veloxquant/attention/latent_pair_tiles.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

// rows x n random codes (code j * n + i of widths[i] bits) and the same rows packed here bit by
// bit, stride bytes apart, with every bit past a row's last field set (the decoders must mask
// it). Exactly rows * stride bytes: the last row's gather would read past a smaller buffer.
struct PackedRows {
  int64_t n, rows, stride;
  std::vector<uint32_t> codes;
  std::vector<uint8_t> packed;
};

PackedRows pack_random_rows(const std::vector<int32_t>& widths, int64_t rows, int64_t stride, std::mt19937& rng) {
  const auto n = static_cast<int64_t>(widths.size());
  PackedRows p{n, rows, stride, std::vector<uint32_t>(static_cast<std::size_t>(rows * n)),
               std::vector<uint8_t>(static_cast<std::size_t>(rows * stride), 0)};
  for (int64_t j = 0; j < rows; ++j) {
    int64_t bit = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int w = widths[static_cast<std::size_t>(i)];
      const uint32_t c = w == 0 ? 0u : static_cast<uint32_t>(rng()) & ((1u << w) - 1u);
      p.codes[static_cast<std::size_t>(j * n + i)] = c;
      for (int k = 0; k < w; ++k, ++bit) {
        if ((c >> k) & 1u)
          p.packed[static_cast<std::size_t>(j * stride + (bit >> 3))] |= static_cast<uint8_t>(1u << (bit & 7));
      }
    }
    for (int64_t b = bit; b < stride * 8; ++b)
      p.packed[static_cast<std::size_t>(j * stride + (b >> 3))] |= static_cast<uint8_t>(1u << (b & 7));
  }
  return p;
}

// The scalar integer codes (kvtc's key scores read them), padded to code_stride with zeros, into
// *plain_codes: they are the packed codes.
void check_scalar_codes(const PackedRows& p, const BitFieldLayout& layout, int64_t code_stride,
                        std::vector<int16_t>* plain_codes) {
  plain_codes->assign(static_cast<std::size_t>(p.rows * code_stride), -1);
  scalar::decode_bit_field_codes(p.packed.data(), p.stride, p.rows, layout, plain_codes->data(), code_stride);
  for (int64_t j = 0; j < p.rows; ++j) {
    for (int64_t i = 0; i < code_stride; ++i) {
      ASSERT_EQ((*plain_codes)[static_cast<std::size_t>(j * code_stride + i)],
                i < p.n ? static_cast<int16_t>(p.codes[static_cast<std::size_t>(j * p.n + i)]) : 0);
    }
  }
}

// The scalar rows, decoded: row j field i is fma(code, step_i, lo_i).
struct ScalarRows {
  const std::vector<float>& step;
  const std::vector<float>& lo;
  const std::vector<float>& rows;
  const std::vector<int16_t>& codes;  // padded to code_stride
  int64_t code_stride;
};

// On every target: the rows, the integer codes and the byte codes (kvtc's integer value sums,
// padded to a multiple of 64 with zeros) equal the scalar ones.
void check_targets(const PackedRows& p, const BitFieldLayout& layout, const ScalarRows& plain, int trial) {
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<int16_t> simd_codes(plain.codes.size(), -1);
    decode_bit_field_codes(p.packed.data(), p.stride, p.rows, layout, simd_codes.data(), plain.code_stride);
    const int64_t byte_stride = (p.n + 63) / 64 * 64 + int64_t{trial % 2} * 64;
    std::vector<uint8_t> simd_bytes(static_cast<std::size_t>(p.rows * byte_stride), 0xAB);
    decode_bit_field_bytes(p.packed.data(), p.stride, p.rows, layout, simd_bytes.data(), byte_stride);
    std::vector<float> simd(plain.rows.size(), -1.0f);
    decode_bit_field_rows(p.packed.data(), p.stride, p.rows, layout, plain.step.data(), plain.lo.data(), simd.data());
    ASSERT_EQ(simd, plain.rows) << target << " n " << p.n << " trial " << trial;
    ASSERT_EQ(simd_codes, plain.codes) << target << " n " << p.n << " trial " << trial;
    for (int64_t j = 0; j < p.rows; ++j) {
      for (int64_t i = 0; i < byte_stride; ++i) {
        ASSERT_EQ(simd_bytes[static_cast<std::size_t>(j * byte_stride + i)],
                  i < p.n ? p.codes[static_cast<std::size_t>(j * p.n + i)] : 0u)
            << target << " n " << p.n << " trial " << trial << " row " << j << " field " << i;
      }
    }
  });
}

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
      const PackedRows p = pack_random_rows(widths, rows, stride, rng);
      std::vector<float> step(static_cast<std::size_t>(n)), lo(static_cast<std::size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        step[static_cast<std::size_t>(i)] = std::abs(real(rng)) * 0.1f;
        lo[static_cast<std::size_t>(i)] = real(rng);
      }
      std::vector<float> plain(static_cast<std::size_t>(rows * n));
      scalar::decode_bit_field_rows(p.packed.data(), stride, rows, layout, step.data(), lo.data(), plain.data());
      const int64_t code_stride = (n + 31) / 32 * 32 + int64_t{trial % 2} * 32;
      std::vector<int16_t> plain_codes;
      ASSERT_NO_FATAL_FAILURE(check_scalar_codes(p, layout, code_stride, &plain_codes));
      ASSERT_NO_FATAL_FAILURE(check_targets(p, layout, {step, lo, plain, plain_codes, code_stride}, trial));
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < n; ++i) {
          const auto at = static_cast<std::size_t>(j * n + i);
          ASSERT_EQ(plain[at], std::fma(static_cast<float>(p.codes[at]), step[static_cast<std::size_t>(i)],
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
        test_support::for_each_simd_target([&](const char* target) {
          std::vector<float> got(want.size(), -1.0f);
          decode_bit_field_pair_tile(packed.data(), stride, rows, layout, step.data(), lo.data(), got.data());
          ASSERT_EQ(got, want) << target << " n " << n << " trial " << trial << " rows " << rows;
        });
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
