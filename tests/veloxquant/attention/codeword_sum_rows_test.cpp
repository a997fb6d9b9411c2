// nsnquant's residual-VQ rows decoded to f32 (attention/codeword_sum_rows.h): the SIMD kernel
// against its scalar reference bit for bit, and the reference against the codewords summed by
// hand in stage order, for 1 to 5 stages, sub-vectors of 8 (the SIMD path) and 4 (scalar), and
// row strides with slack.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/codeword_sum_rows.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(CodewordSumRows, EqualsTheScalarReferenceAndTheStageSum) {
  std::mt19937 rng(3);
  std::normal_distribution<float> x(0.0f, 1.0f);
  for (int dim : {8, 4}) {
    for (int stages = 1; stages <= 5; ++stages) {
      const int entries = 256;
      const int64_t subvectors = 64 / dim, n_rows = 13, stride = subvectors * stages + 5, out_stride = 64 + 8;
      std::vector<float> words(static_cast<std::size_t>(stages * entries * dim));
      for (float& w : words) w = x(rng);
      std::vector<uint8_t> codes(static_cast<std::size_t>(stride * n_rows));
      for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & 0xFF);
      std::vector<float> simd(static_cast<std::size_t>(out_stride * n_rows), -3.0f), plain = simd, expected = simd;
      codeword_sum_rows(codes.data(), stride, n_rows, subvectors, stages, words.data(), int64_t{entries} * dim, dim,
                        simd.data(), out_stride);
      scalar::codeword_sum_rows(codes.data(), stride, n_rows, subvectors, stages, words.data(), int64_t{entries} * dim,
                                dim, plain.data(), out_stride);
      for (int64_t j = 0; j < n_rows; ++j) {
        for (int64_t s = 0; s < subvectors; ++s) {
          for (int e = 0; e < dim; ++e) {
            float sum = 0.0f;
            for (int st = 0; st < stages; ++st) {
              const int code = codes[static_cast<std::size_t>(j * stride + s * stages + st)];
              const float w = words[static_cast<std::size_t>((st * entries + code) * dim + e)];
              sum = st == 0 ? w : sum + w;
            }
            expected[static_cast<std::size_t>(j * out_stride + s * dim + e)] = sum;
          }
        }
      }
      ASSERT_EQ(simd, plain) << "dim " << dim << " stages " << stages;
      ASSERT_EQ(plain, expected) << "dim " << dim << " stages " << stages;
    }
  }
}

}  // namespace
// The fused kernels (decode into a register, then score or accumulate): the SIMD kernels equal
// their scalar references bit for bit (stages 1-5: the compile-time 1/2/4 and the fallback; sub-vector
// widths 8 and 4; 1, 3, 4, 7 queries: GQA groups of 1 and 3, prefill blocks; 1-13 rows: the 4-row
// blocks and ragged remainders), and both equal decode-then-multiply in double within rounding.
TEST(CodewordSumFused, ScoresAndSumsEqualTheScalarReferenceAndTheDecodedRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> x(0.0f, 1.0f);
  for (int dim : {8, 4}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (const int64_t n_rows : {int64_t{13}, int64_t{4}, int64_t{1}}) {
        for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
          const int entries = 256;
          const int64_t subvectors = 64 / dim, stride = subvectors * stages + 5, d = 64, q_stride = 70, ld = 17;
          std::vector<float> words(static_cast<std::size_t>(stages * entries * dim));
          for (float& w : words) w = x(rng);
          std::vector<uint8_t> codes(static_cast<std::size_t>(stride * n_rows));
          for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & 0xFF);
          std::vector<float> q(static_cast<std::size_t>(n_q * q_stride));
          for (float& v : q) v = x(rng);
          // The decoded rows, by the tile kernel's reference.
          std::vector<float> rows(static_cast<std::size_t>(n_rows * d));
          scalar::codeword_sum_rows(codes.data(), stride, n_rows, subvectors, stages, words.data(),
                                    int64_t{entries} * dim, dim, rows.data(), d);
          std::vector<float> simd(static_cast<std::size_t>(n_q * ld), -5.0f), plain = simd;
          codeword_sum_scores(codes.data(), stride, n_rows, subvectors, stages, words.data(), int64_t{entries} * dim,
                              dim, q.data(), q_stride, n_q, simd.data(), ld);
          scalar::codeword_sum_scores(codes.data(), stride, n_rows, subvectors, stages, words.data(),
                                      int64_t{entries} * dim, dim, q.data(), q_stride, n_q, plain.data(), ld);
          ASSERT_EQ(simd, plain) << "scores: dim " << dim << " stages " << stages << " rows " << n_rows;
          for (int64_t r = 0; r < n_q; ++r) {
            for (int64_t j = 0; j < n_rows; ++j) {
              double want = 0.0;
              for (int64_t e = 0; e < d; ++e) want += double(q[r * q_stride + e]) * rows[j * d + e];
              EXPECT_NEAR(simd[r * ld + j], want, 1e-4 * stages * d);
            }
            for (int64_t j = n_rows; j < ld; ++j) EXPECT_EQ(simd[r * ld + j], -5.0f);  // untouched
          }
          std::vector<float> w(static_cast<std::size_t>(n_q * ld));
          for (float& v : w) v = x(rng);
          const int64_t acc_stride = d + 3;
          std::vector<float> acc0(static_cast<std::size_t>(n_q * acc_stride));
          for (float& v : acc0) v = x(rng);
          std::vector<float> acc(acc0), acc_plain(acc0);
          codeword_sum_accumulate(codes.data(), stride, n_rows, subvectors, stages, words.data(),
                                  int64_t{entries} * dim, dim, w.data(), ld, n_q, acc.data(), acc_stride);
          scalar::codeword_sum_accumulate(codes.data(), stride, n_rows, subvectors, stages, words.data(),
                                          int64_t{entries} * dim, dim, w.data(), ld, n_q, acc_plain.data(), acc_stride);
          ASSERT_EQ(acc, acc_plain) << "sums: dim " << dim << " stages " << stages << " rows " << n_rows;
          for (int64_t r = 0; r < n_q; ++r) {
            for (int64_t e = 0; e < acc_stride; ++e) {
              double want = acc0[r * acc_stride + e];
              if (e < d) {
                for (int64_t j = 0; j < n_rows; ++j) want += double(w[r * ld + j]) * rows[j * d + e];
              }
              EXPECT_NEAR(acc[r * acc_stride + e], want, 1e-4 * stages * (n_rows + 1));
            }
          }
        }
      }
    }
  }
}

}  // namespace veloxquant::attention::kernels
