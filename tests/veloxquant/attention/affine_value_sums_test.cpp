// The group-affine value kernels against their scalar references (bit for bit), and the
// references against a plain dequantize-then-weight sum written from the layout's definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/half.h"
#include "veloxquant/attention/affine_value_sums.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant::attention::kernels {
namespace {

std::vector<float> uniform(std::size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// One (groups, row stride, rows, queries) case: the group weights equal to the scalar reference
// bit for bit, the scaled weights exactly w * scale and the biases near sum w * min in double.
void check_group_weights(int64_t groups, int64_t stride, int64_t n, int64_t nq) {
  const int64_t ld = n + 3;
  std::vector<uint16_t> params(static_cast<std::size_t>(n * stride));
  const auto raw = uniform(params.size(), -2.0f, 2.0f, 3);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = base::f32_to_f16(raw[i]);
  const auto w = uniform(static_cast<std::size_t>(nq * ld), 0.0f, 1.0f, 4);
  std::vector<float> columns(static_cast<std::size_t>(2 * groups * n));
  std::vector<float> scaled(static_cast<std::size_t>(groups * nq * n)), scaled_ref(scaled.size());
  std::vector<float> bias(static_cast<std::size_t>(groups * nq)), bias_ref(bias.size());
  group_weights(params.data(), stride, n, groups, w.data(), ld, nq, columns.data(), scaled.data(), bias.data());
  scalar::group_weights(params.data(), stride, n, groups, w.data(), ld, nq, columns.data(), scaled_ref.data(),
                        bias_ref.data());
  ASSERT_EQ(scaled, scaled_ref) << "groups " << groups << " stride " << stride << " n " << n << " nq " << nq;
  ASSERT_EQ(bias, bias_ref) << "groups " << groups << " stride " << stride << " n " << n << " nq " << nq;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < nq; ++r) {
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const float s = base::f16_to_f32(params[static_cast<std::size_t>(j * stride + 2 * g)]);
        const float m = base::f16_to_f32(params[static_cast<std::size_t>(j * stride + 2 * g + 1)]);
        const float wj = w[static_cast<std::size_t>(r * ld + j)];
        ASSERT_EQ(scaled_ref[static_cast<std::size_t>((g * nq + r) * n + j)], wj * s);
        sum += static_cast<double>(wj) * m;
      }
      ASSERT_NEAR(bias_ref[static_cast<std::size_t>(g * nq + r)], sum, 1e-5 * (1.0 + std::fabs(sum)));
    }
  }
}

TEST(AffineValueSums, GroupWeightsEqualTheReferenceAndTheDefinition) {
  for (int64_t groups : {1, 2, 3}) {
    for (int64_t stride_pad : {0, 2}) {
      const int64_t stride = 2 * groups + stride_pad;
      for (int64_t n : {1, 7, 8, 32, 37, 64}) {
        for (int64_t nq : {1, 3, 5}) {
          check_group_weights(groups, stride, n, nq);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(AffineValueSums, GroupBiasesAddPerChannelGroup) {
  const int64_t d = 40, group = 16, nq = 3, stride = 43;  // a partial last group
  const auto bias = uniform(3 * nq, -1.0f, 1.0f, 5);
  auto out = uniform(static_cast<std::size_t>(nq * stride), -1.0f, 1.0f, 6), ref = out, plain = out;
  add_group_biases(bias.data(), nq, d, group, out.data(), stride);
  scalar::add_group_biases(bias.data(), nq, d, group, ref.data(), stride);
  EXPECT_EQ(out, ref);
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t c = 0; c < d; ++c)
      plain[static_cast<std::size_t>(r * stride + c)] += bias[static_cast<std::size_t>((c / group) * nq + r)];
  }
  EXPECT_EQ(ref, plain);  // and the padding past d untouched
}

// Packed rows of random codes (every word set beforehand, so bits past a row's codes hold
// garbage the kernel must mask) and the codes themselves.
struct WordRows {
  int bits;
  int64_t n, group, rows, stride;
  std::vector<uint32_t> packed;
  std::vector<uint8_t> raw;
};

// 37 rows of n random codes, `stride` = the packed words + 3 apart (rows need not be back to back).
WordRows random_word_rows(int bits, int64_t n, int64_t group, std::mt19937& rng) {
  const int64_t rows = 37, words = static_cast<int64_t>(core::packed_words(static_cast<std::size_t>(n), bits));
  WordRows t{bits, n, group, rows, words + 3, {}, {}};
  t.packed.assign(static_cast<std::size_t>(rows * t.stride), 0xA5A5A5A5u);
  t.raw.resize(static_cast<std::size_t>(rows * n));
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t i = 0; i < n; ++i) t.raw[static_cast<std::size_t>(j * n + i)] = static_cast<uint8_t>(code(rng));
    std::vector<uint32_t> row(static_cast<std::size_t>(words));
    core::pack_words(t.raw.data() + j * n, static_cast<std::size_t>(n), bits, row.data());
    std::copy(row.begin(), row.end(), t.packed.begin() + j * t.stride);
  }
  return t;
}

// 1, 2, 3, 4 and 7 queries' weights (with a bias when the count is odd) over the rows: the kernel
// equal to the scalar reference bit for bit, and the reference near the decoded codes weighted
// in double. Counts the cases checked in `checked`.
void check_word_values(const WordRows& t, const std::vector<float>& levels, bool with_levels, int& checked) {
  const int bits = t.bits, n_levels = 1 << t.bits;
  const int64_t n = t.n, group = t.group, rows = t.rows, stride = t.stride, groups = (n + group - 1) / group;
  const std::vector<uint32_t>& packed = t.packed;
  const std::vector<uint8_t>& raw = t.raw;
  for (int64_t nq : {1, 2, 3, 4, 7}) {
    const auto ws = uniform(static_cast<std::size_t>(groups * nq * rows), -1.0f, 1.0f, 20);
    const int64_t acc_stride = n + 5;
    const auto start = uniform(static_cast<std::size_t>(nq * acc_stride), -1.0f, 1.0f, 21);
    auto acc = start, ref = start;
    const float* table = with_levels ? levels.data() : nullptr;
    const auto biases = uniform(static_cast<std::size_t>(groups * nq), -1.0f, 1.0f, 22);
    const float* bias = nq % 2 == 1 ? biases.data() : nullptr;  // with and without
    const WordValueRows tile{packed.data(), stride, rows, n, bits, group, table};
    accumulate_word_values(tile, {ws.data(), bias, nq, acc.data(), acc_stride});
    scalar::accumulate_word_values(tile, {ws.data(), bias, nq, ref.data(), acc_stride});
    ASSERT_EQ(acc, ref) << "bits " << bits << " n " << n << " group " << group << " nq " << nq
                        << (with_levels ? " levels" : "");
    // The reference against the definition: decoded codes weighted in double.
    for (int64_t r = 0; r < nq; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        double want = start[static_cast<std::size_t>(r * acc_stride + i)];
        if (bias != nullptr) want += bias[static_cast<std::size_t>((i / group) * nq + r)];
        for (int64_t j = 0; j < rows; ++j) {
          const int c = raw[static_cast<std::size_t>(j * n + i)];
          const double x = with_levels ? levels[static_cast<std::size_t>(c)] : c;
          want += ws[static_cast<std::size_t>(((i / group) * nq + r) * rows + j)] * x;
        }
        ASSERT_NEAR(ref[static_cast<std::size_t>(r * acc_stride + i)], want, 1e-4 * n_levels)
            << "bits " << bits << " n " << n;
      }
    }
    ++checked;
  }
}

TEST(AffineValueSums, WordValuesEqualTheReferenceBitForBit) {
  std::mt19937 rng(9);
  int checked = 0;
  for (int bits = 1; bits <= 8; ++bits) {
    const int n_levels = 1 << bits;
    const auto levels = uniform(static_cast<std::size_t>(n_levels), -3.0f, 3.0f, 10 + bits);
    for (int64_t n : {8, 40, 64, 128, 256}) {
      for (int64_t group : {8, 16, 32, 64}) {
        for (bool with_levels : {false, true}) {
          if (!can_accumulate_word_values(bits, n, group, with_levels)) continue;
          const WordRows t = random_word_rows(bits, n, group, rng);
          check_word_values(t, levels, with_levels, checked);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_TRUE(can_accumulate_word_values(3, 64, 32, true));
  EXPECT_FALSE(can_accumulate_word_values(4, 64, 32, true));   // 16 levels do not fit 8 lanes
  EXPECT_FALSE(can_accumulate_word_values(3, 60, 32, false));  // a partial chunk
  EXPECT_FALSE(can_accumulate_word_values(3, 64, 12, false));  // a chunk across two groups
}

}  // namespace
}  // namespace veloxquant::attention::kernels
