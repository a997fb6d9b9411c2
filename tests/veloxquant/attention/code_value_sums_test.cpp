// The integer value sums (attention/code_value_sums.h): the dispatched kernel (AMX where this
// machine has it) against the scalar reference bit for bit, and the reference against the f32
// weighted sum of the decoded rows (lo + step * code) within the 16-bit weight rounding, for
// ranks with and without a last partial block of 16 (kvtc's 185-192, an odd block count), a
// GQA group of 9 queries, more queries than one tile's 16, chunks of 1 to 64 rows and more than
// one chunk, weights spanning many orders of magnitude, all-zero queries and a zero-bit column.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/code_value_sums.h"

namespace veloxquant::attention::kernels {
namespace {

// A head's rows of r components: codes `stride` bytes apart, and each component's step and lo.
struct ValueRows {
  int64_t r, stride, n_rows;
  std::vector<uint8_t> codes;
  std::vector<float> step, lo;
};

ValueRows make_rows(int64_t r, int64_t n_rows, std::mt19937& rng, std::uniform_int_distribution<int>& code,
                    std::normal_distribution<float>& normal) {
  ValueRows v{r, (r + 63) / 64 * 64, n_rows, {}, {}, {}};
  v.codes.resize(static_cast<std::size_t>(n_rows * v.stride));
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int64_t i = 0; i < v.stride; ++i) {
      // Component 1 a zero-bit column (code 0, step 0, lo 0); the rest up to 8 bits.
      v.codes[static_cast<std::size_t>(j * v.stride + i)] =
          i < r && i != 1 ? static_cast<uint8_t>(code(rng) >> (i % 8)) : 0;
    }
  }
  v.step.resize(static_cast<std::size_t>(r));
  v.lo.resize(static_cast<std::size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    v.step[static_cast<std::size_t>(i)] = i == 1 ? 0.0f : std::abs(normal(rng)) * 0.05f;
    v.lo[static_cast<std::size_t>(i)] = i == 1 ? 0.0f : normal(rng);
  }
  return v;
}

// Softmax numerators: exp of scores minus a max, many tiny; query 0 of the 17 all zero.
std::vector<float> softmax_weights(int64_t n_q, int64_t n_rows, int64_t ld, std::mt19937& rng,
                                   std::uniform_real_distribution<float>& unit) {
  std::vector<float> w(static_cast<std::size_t>(n_q * ld), 0.0f);
  for (int64_t q = 0; q < n_q; ++q) {
    for (int64_t j = 0; j < n_rows; ++j) {
      w[static_cast<std::size_t>(q * ld + j)] = n_q == 17 && q == 0 ? 0.0f : std::exp(-12.0f * unit(rng) * unit(rng));
    }
  }
  return w;
}

// The reference's sums (`plain`, accumulated onto `acc0`) against the f64 weighted sum of the
// decoded rows, within the 16-bit weight rounding; the columns past r are left as they were.
void check_near_decoded_sums(const ValueRows& v, const std::vector<float>& w, int64_t n_q, int64_t ld,
                             const std::vector<float>& acc0, const std::vector<float>& plain, int64_t acc_stride) {
  for (int64_t q = 0; q < n_q; ++q) {
    double wsum = 0.0;
    for (int64_t j = 0; j < v.n_rows; ++j) wsum += w[static_cast<std::size_t>(q * ld + j)];
    for (int64_t i = 0; i < acc_stride; ++i) {
      const auto at = static_cast<std::size_t>(q * acc_stride + i);
      if (i >= v.r) {
        ASSERT_EQ(plain[at], acc0[at]) << "column past r written";
        continue;
      }
      double exact = acc0[at];
      double magnitude = std::abs(acc0[at]);
      for (int64_t j = 0; j < v.n_rows; ++j) {
        const double value = static_cast<double>(v.lo[static_cast<std::size_t>(i)]) +
                             static_cast<double>(v.step[static_cast<std::size_t>(i)]) *
                                 v.codes[static_cast<std::size_t>(j * v.stride + i)];
        exact += w[static_cast<std::size_t>(q * ld + j)] * value;
        magnitude += w[static_cast<std::size_t>(q * ld + j)] * std::abs(value);
      }
      // Each weight within half a step of 1/65535 of its chunk's largest (<= 1), plus f32
      // rounding of the sums.
      const double bound = 1e-5 * magnitude + 2e-5 * static_cast<double>(v.n_rows) *
                                                  (std::abs(v.lo[static_cast<std::size_t>(i)]) +
                                                   255.0 * v.step[static_cast<std::size_t>(i)]);
      ASSERT_NEAR(plain[at], exact, bound) << "r " << v.r << " q " << q << " i " << i << " wsum " << wsum;
    }
  }
}

TEST(CodeValueSums, KernelEqualsScalarReferenceAndApproximatesTheFloatSums) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r : {5, 16, 64, 100, 185, 189, 192, 256}) {
    for (int64_t n_q : {1, 9, 17}) {
      for (int64_t n_rows : {1, 7, 64, 100, 130}) {
        const int64_t ld = n_rows + 3, acc_stride = r + 5;
        const ValueRows v = make_rows(r, n_rows, rng, code, normal);
        const std::vector<float> w = softmax_weights(n_q, n_rows, ld, rng, unit);
        std::vector<float> acc0(static_cast<std::size_t>(n_q * acc_stride));
        for (float& a : acc0) a = normal(rng);
        std::vector<float> plain = acc0, fast = acc0;
        const TileWeights weights{w.data(), n_q, ld};
        const CodeValueRows rows{v.codes.data(), v.stride, n_rows, r, v.step.data(), v.lo.data()};
        scalar::accumulate_code_values(weights, rows, plain.data(), acc_stride);
        accumulate_code_values(weights, rows, fast.data(), acc_stride);
        ASSERT_EQ(fast, plain) << "r " << r << " queries " << n_q << " rows " << n_rows
                               << (code_value_sums_fast() ? " (AMX)" : " (scalar)");
        check_near_decoded_sums(v, w, n_q, ld, acc0, plain, acc_stride);
        if (HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
