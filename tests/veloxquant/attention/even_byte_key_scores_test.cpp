// 8-bit even-level keys scored from their codes against a 16-bit query: the SIMD loop against its
// scalar reference (bit for bit), both against exact f64 scores within the query's rounding, and
// the extreme codes and query values summed without overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/half.h"
#include "support/random_values.h"

#include "veloxquant/attention/block_level_key_scores.h"
#include "veloxquant/attention/even_byte_key_scores.h"

namespace veloxquant::attention::kernels {
namespace {

struct Rows {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  BlockLevelKeys keys;
};

Rows random_rows(int64_t n_rows, uint32_t seed) {
  Rows rows;
  // Rows as tightly packed as the cache stores them: the last row ends the buffer.
  rows.codes = test_support::random_bytes(static_cast<std::size_t>(n_rows * 64), seed);
  const auto s = test_support::normal_values(static_cast<std::size_t>(n_rows * 2), seed + 1);
  for (float x : s) rows.scales.push_back(base::f32_to_f16(0.1f + std::fabs(x)));
  rows.keys.codes = rows.codes.data();
  rows.keys.code_stride = 64;
  rows.keys.scales = rows.scales.data();
  rows.keys.n_rows = n_rows;
  rows.keys.dim = 64;
  rows.keys.bits = 8;
  rows.keys.block = 32;
  return rows;
}

TEST(EvenByteKeyScores, ShapesItTakes) {
  if (!can_score_even_byte_rows(8, 64, 32)) GTEST_SKIP() << "no AVX-512 VBMI + VNNI";
  EXPECT_FALSE(can_score_even_byte_rows(7, 64, 32));
  EXPECT_FALSE(can_score_even_byte_rows(8, 128, 32));
  EXPECT_FALSE(can_score_even_byte_rows(8, 64, 64));
}

// One (rows, queries, bias) case: SIMD equal to scalar bit for bit, nothing written past the
// tile, and the scores near exact ones over the f32 query and the rows' levels.
void check_even_byte_scores(int64_t n_rows, int64_t n_q, bool with_bias) {
  const Rows rows = random_rows(n_rows, 41);
  const int64_t ld = n_rows + 2;
  const auto q = test_support::normal_values(static_cast<std::size_t>(n_q * 64), 43);
  std::vector<int16_t> q16(q.size());
  std::vector<float> step(static_cast<std::size_t>(n_q)), bias(static_cast<std::size_t>(n_q));
  for (int64_t r = 0; r < n_q; ++r) {
    quantize_query_i16(q.data() + r * 64, 64, kEvenByteQueryLimit, q16.data() + r * 64, &step[r]);
    bias[r] = 0.25f * static_cast<float>(r) - 0.3f;
  }
  const float* b = with_bias ? bias.data() : nullptr;
  std::vector<float> out(static_cast<std::size_t>(n_q * ld), -7.0f), ref = out;
  score_even_byte_rows(rows.keys, q16.data(), step.data(), b, n_q, out.data(), ld);
  scalar::score_even_byte_rows(rows.keys, q16.data(), step.data(), b, n_q, ref.data(), ld);
  ASSERT_EQ(out, ref) << n_rows << " rows, " << n_q << " queries";
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < ld; ++j) {
      const float got = ref[static_cast<std::size_t>(r * ld + j)];
      if (j >= n_rows) {
        EXPECT_EQ(got, -7.0f);  // past the tile: untouched
        continue;
      }
      // Exact score over the f32 query and the rows' levels: off only by the query's rounding
      // (half a step per element) and f32 sums.
      double exact = with_bias ? bias[r] : 0.0, bound = 0.0;
      for (int64_t e = 0; e < 64; ++e) {
        const double level = (2.0 * rows.codes[static_cast<std::size_t>(j * 64 + e)] - 255.0) / 256.0;
        const double s = base::f16_to_f32(rows.scales[static_cast<std::size_t>(j * 2 + e / 32)]);
        exact += double(q[static_cast<std::size_t>(r * 64 + e)]) * level * s;
        bound += 0.5 * step[r] * std::fabs(level * s) + 1e-6 * std::fabs(q[r * 64 + e] * level * s);
      }
      EXPECT_NEAR(got, exact, bound + 1e-5) << "row " << j << " query " << r;
    }
  }
}

TEST(EvenByteKeyScores, MatchesScalarReferenceAndExactScores) {
  // 8, 9, 13: whole and partial passes of the SIMD loop (eight rows a pass).
  for (const int64_t n_rows : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}, int64_t{13}, int64_t{64}}) {
    for (const int64_t n_q : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}}) {
      for (const bool with_bias : {false, true}) {
        check_even_byte_scores(n_rows, n_q, with_bias);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The largest magnitudes the rounding allows: |q16| = 32639 against codes 0 and 255 (levels
// -255/256 and 255/256) in every element: |T| = 64 * 32639 * 255 / 2 per block... within int32.
TEST(EvenByteKeyScores, ExtremeMagnitudesSumExactly) {
  Rows rows = random_rows(4, 51);
  for (int64_t e = 0; e < 64; ++e) {
    rows.codes[static_cast<std::size_t>(e)] = 255;                    // all top
    rows.codes[static_cast<std::size_t>(64 + e)] = 0;                 // all bottom
    rows.codes[static_cast<std::size_t>(128 + e)] = e % 2 ? 255 : 0;  // alternating
    rows.codes[static_cast<std::size_t>(192 + e)] = e < 32 ? 255 : 0;
  }
  for (uint16_t& s : rows.scales) s = base::f32_to_f16(1.0f);
  for (const int16_t sign : {int16_t{1}, int16_t{-1}}) {
    std::vector<int16_t> q16(64, static_cast<int16_t>(sign * kEvenByteQueryLimit));
    const float step = 1.0f / kEvenByteQueryLimit;
    std::vector<float> out(4), ref(4);
    score_even_byte_rows(rows.keys, q16.data(), &step, nullptr, 1, out.data(), 4);
    scalar::score_even_byte_rows(rows.keys, q16.data(), &step, nullptr, 1, ref.data(), 4);
    EXPECT_EQ(out, ref);
    // Each element contributes sign * (+-255/256); the exact totals:
    const double unit = 255.0 / 256.0;
    EXPECT_NEAR(ref[0], sign * 64 * unit, 1e-3);
    EXPECT_NEAR(ref[1], -sign * 64 * unit, 1e-3);
    EXPECT_NEAR(ref[2], 0.0, 1e-3);
    EXPECT_NEAR(ref[3], 0.0, 1e-3);
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
