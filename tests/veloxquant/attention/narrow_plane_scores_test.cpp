// Planes narrower than the integer kernel's chunk (attention/narrow_plane_scores.h): rows read
// padded, in place where the buffer allows and through zero-padded copies at its end, give the
// same scores as the scalar reference over explicitly padded copies (bit for bit) and the exact
// integer dot products over the rows' own codes in natural order.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "support/random_values.h"

#include "veloxquant/attention/integer_key_scores.h"
#include "veloxquant/attention/narrow_plane_scores.h"

namespace veloxquant::attention::kernels {
namespace {

// The i-th b-bit code of a row's LSB-first stream.
int code_of(const uint8_t* row, int bits, int64_t i) {
  const int64_t bit = i * bits;
  return (row[bit / 8] >> (bit % 8)) & ((1 << bits) - 1);
}

struct Case {
  int bits;
  int64_t codes;
};

TEST(NarrowPlaneScores, LayoutPositionsAreTheInverseOfNaturalAndPadToWholeChunks) {
  for (const Case c : {Case{4, 16}, Case{2, 48}, Case{2, 30}, Case{8, 5}, Case{4, 64}}) {
    const NarrowPlane p = narrow_plane(c.bits, c.codes);
    ASSERT_GT(p.padded, 0);
    EXPECT_EQ(p.plane_bytes, (c.codes * c.bits + 7) / 8);
    EXPECT_EQ(p.padded % integer_chunk_bytes(), 0);
    EXPECT_GE(p.padded, p.plane_bytes);
    EXPECT_LT(p.padded - p.plane_bytes, integer_chunk_bytes());
    int64_t real = 0;
    for (int64_t e = 0; e < p.dim(); ++e) {
      const int64_t i = p.natural(e);
      if (i < 0) continue;
      ++real;
      EXPECT_EQ(p.position(i), e) << c.bits << " bits, " << c.codes << " codes";
    }
    EXPECT_EQ(real, c.codes);
  }
  EXPECT_EQ(narrow_plane(3, 16).padded, 0);
  EXPECT_EQ(narrow_plane(4, 0).padded, 0);
}

// One (row stride, rows) case, four queries: the kernel equal to the scalar reference over
// zero-padded copies of the rows, and to the exact integer dot products of the rows' own codes.
void check_case(const Case& c, const NarrowPlane& p, int64_t extra, int64_t n_rows, std::mt19937& rng) {
  const int64_t stride = p.plane_bytes + extra, n_q = 4, q_stride = p.dim(), ld = n_rows + 2;
  // Exactly the rows' bytes: a read past the last one would leave the buffer.
  const std::vector<uint8_t> bytes = test_support::random_bytes(static_cast<std::size_t>(n_rows * stride), 9);
  std::uniform_int_distribution<int> value(-300, 300);
  std::vector<int16_t> natural(static_cast<std::size_t>(n_q * c.codes));
  for (auto& v : natural) v = static_cast<int16_t>(value(rng));
  // Padded code order; padding zero, as the contract asks.
  std::vector<int16_t> q16(static_cast<std::size_t>(n_q * q_stride), 0);
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t i = 0; i < c.codes; ++i) {
      q16[static_cast<std::size_t>(r * q_stride + p.position(i))] = natural[static_cast<std::size_t>(r * c.codes + i)];
    }
  }
  const std::vector<float> step{1.0f, 0.5f, 0.25f, 2.0f}, bias{0.0f, 1.5f, -3.0f, 0.25f};
  std::vector<float> got(static_cast<std::size_t>(n_q * ld), -7.0f), ref(got);
  const IntegerQueries queries{q16.data(), step.data(), bias.data(), n_q};
  score_narrow_codes_i16(bytes.data(), stride, n_rows, p, bytes.data() + bytes.size(), queries, got.data(), ld);
  // Reference: each row copied into a zeroed padded row, scored by the scalar loop.
  std::vector<uint8_t> padded(static_cast<std::size_t>(n_rows * p.padded), 0);
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int64_t k = 0; k < p.plane_bytes; ++k)
      padded[static_cast<std::size_t>(j * p.padded + k)] = bytes[static_cast<std::size_t>(j * stride + k)];
  }
  scalar::score_codes_i16({padded.data(), p.padded, n_rows, p.padded, c.bits}, queries, ref.data(), ld);
  ASSERT_EQ(got, ref) << c.bits << " bits, " << c.codes << " codes, stride " << stride << ", " << n_rows << " rows";
  // Independent: the exact integer dot product of each row's own codes, in natural order
  // (small enough that step * sum + bias is exact in f32).
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      int64_t sum = 0;
      for (int64_t i = 0; i < c.codes; ++i) {
        sum +=
            int64_t{natural[static_cast<std::size_t>(r * c.codes + i)]} * code_of(bytes.data() + j * stride, c.bits, i);
      }
      EXPECT_EQ(got[static_cast<std::size_t>(r * ld + j)], step[r] * static_cast<float>(sum) + bias[r])
          << c.bits << " bits, " << c.codes << " codes, query " << r << ", row " << j;
    }
  }
}

TEST(NarrowPlaneScores, EqualTheScalarReferenceOverPaddedCopiesAndTheExactIntegerSums) {
  std::mt19937 rng(5);
  for (const Case c : {Case{4, 16}, Case{2, 48}, Case{2, 30}, Case{4, 10}, Case{8, 5}, Case{8, 24}, Case{4, 64}}) {
    const NarrowPlane p = narrow_plane(c.bits, c.codes);
    for (const int64_t extra : {int64_t{0}, int64_t{3}}) {
      for (const int64_t n_rows : {int64_t{1}, int64_t{5}, int64_t{37}}) {
        check_case(c, p, extra, n_rows, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
