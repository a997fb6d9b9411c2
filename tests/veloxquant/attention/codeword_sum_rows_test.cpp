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

constexpr int kEntries = 256;

// Random codebooks (stages x 256 codewords of dim floats) and rows of random codes with 5 bytes
// of slack per row, drawn in that order from the test's generator; tile() describes them to the
// kernels.
struct RandomRows {
  int dim, stages;
  int64_t subvectors, n_rows, stride;
  std::vector<float> words;
  std::vector<uint8_t> codes;

  RandomRows(int dim_, int stages_, int64_t n_rows_, std::mt19937& rng, std::normal_distribution<float>& x)
      : dim(dim_), stages(stages_), subvectors(64 / dim_), n_rows(n_rows_), stride(subvectors * stages_ + 5) {
    words.resize(static_cast<std::size_t>(stages) * kEntries * dim);
    for (float& w : words) w = x(rng);
    codes.resize(static_cast<std::size_t>(stride * n_rows));
    for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & 0xFF);
  }
  CodewordSumTile tile() const {
    return {codes.data(), stride, n_rows, subvectors, stages, words.data(), int64_t{kEntries} * dim, dim};
  }
  // Element e of sub-vector s of row j: its stages' codewords added in stage order, by hand.
  float stage_sum(int64_t j, int64_t s, int e) const {
    float sum = 0.0f;
    for (int st = 0; st < stages; ++st) {
      const int code = codes[static_cast<std::size_t>(j * stride + s * stages + st)];
      const float w = words[(static_cast<std::size_t>(st) * kEntries + code) * dim + e];
      sum = st == 0 ? w : sum + w;
    }
    return sum;
  }
};

TEST(CodewordSumRows, EqualsTheScalarReferenceAndTheStageSum) {
  std::mt19937 rng(3);
  std::normal_distribution<float> x(0.0f, 1.0f);
  for (int dim : {8, 4}) {
    for (int stages = 1; stages <= 5; ++stages) {
      const RandomRows rows(dim, stages, 13, rng, x);
      const int64_t out_stride = 64 + 8;
      std::vector<float> simd(static_cast<std::size_t>(out_stride * rows.n_rows), -3.0f), plain = simd, expected = simd;
      codeword_sum_rows(rows.tile(), simd.data(), out_stride);
      scalar::codeword_sum_rows(rows.tile(), plain.data(), out_stride);
      for (int64_t j = 0; j < rows.n_rows; ++j) {
        for (int64_t s = 0; s < rows.subvectors; ++s) {
          for (int e = 0; e < dim; ++e)
            expected[static_cast<std::size_t>(j * out_stride + s * dim + e)] = rows.stage_sum(j, s, e);
        }
      }
      ASSERT_EQ(simd, plain) << "dim " << dim << " stages " << stages;
      ASSERT_EQ(plain, expected) << "dim " << dim << " stages " << stages;
    }
  }
}

}  // namespace

namespace {

constexpr int64_t kDim = 64;

// The fused scores of n_q queries (q_stride 70, ld 17): SIMD equal to scalar bit for bit, both
// within rounding of the decoded rows' dot products in double, columns past the rows untouched.
void check_fused_scores(const RandomRows& rows, const std::vector<float>& decoded, int64_t n_q, std::mt19937& rng,
                        std::normal_distribution<float>& x) {
  const int64_t q_stride = 70, ld = 17;
  std::vector<float> q(static_cast<std::size_t>(n_q * q_stride));
  for (float& v : q) v = x(rng);
  std::vector<float> simd(static_cast<std::size_t>(n_q * ld), -5.0f), plain = simd;
  codeword_sum_scores(rows.tile(), q.data(), q_stride, n_q, simd.data(), ld);
  scalar::codeword_sum_scores(rows.tile(), q.data(), q_stride, n_q, plain.data(), ld);
  ASSERT_EQ(simd, plain) << "scores: dim " << rows.dim << " stages " << rows.stages << " rows " << rows.n_rows;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < rows.n_rows; ++j) {
      double want = 0.0;
      for (int64_t e = 0; e < kDim; ++e) want += double(q[r * q_stride + e]) * decoded[j * kDim + e];
      EXPECT_NEAR(simd[r * ld + j], want, 1e-4 * rows.stages * kDim);
    }
    for (int64_t j = rows.n_rows; j < ld; ++j) EXPECT_EQ(simd[r * ld + j], -5.0f);  // untouched
  }
}

// The fused weighted sums into accumulators with 3 columns of slack: SIMD equal to scalar bit
// for bit, both within rounding of the decoded rows' sums in double, the slack untouched.
void check_fused_sums(const RandomRows& rows, const std::vector<float>& decoded, int64_t n_q, std::mt19937& rng,
                      std::normal_distribution<float>& x) {
  const int64_t ld = 17, acc_stride = kDim + 3;
  std::vector<float> w(static_cast<std::size_t>(n_q * ld));
  for (float& v : w) v = x(rng);
  std::vector<float> acc0(static_cast<std::size_t>(n_q * acc_stride));
  for (float& v : acc0) v = x(rng);
  std::vector<float> acc(acc0), acc_plain(acc0);
  codeword_sum_accumulate(rows.tile(), w.data(), ld, n_q, acc.data(), acc_stride);
  scalar::codeword_sum_accumulate(rows.tile(), w.data(), ld, n_q, acc_plain.data(), acc_stride);
  ASSERT_EQ(acc, acc_plain) << "sums: dim " << rows.dim << " stages " << rows.stages << " rows " << rows.n_rows;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t e = 0; e < acc_stride; ++e) {
      double want = acc0[r * acc_stride + e];
      if (e < kDim) {
        for (int64_t j = 0; j < rows.n_rows; ++j) want += double(w[r * ld + j]) * decoded[j * kDim + e];
      }
      EXPECT_NEAR(acc[r * acc_stride + e], want, 1e-4 * rows.stages * (rows.n_rows + 1));
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
          const RandomRows rows(dim, stages, n_rows, rng, x);
          // The decoded rows, by the tile kernel's reference.
          std::vector<float> decoded(static_cast<std::size_t>(n_rows * kDim));
          scalar::codeword_sum_rows(rows.tile(), decoded.data(), kDim);
          check_fused_scores(rows, decoded, n_q, rng, x);
          if (HasFatalFailure()) return;
          check_fused_sums(rows, decoded, n_q, rng, x);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace veloxquant::attention::kernels
