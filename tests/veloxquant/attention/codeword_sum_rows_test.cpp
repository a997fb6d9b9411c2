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
}  // namespace veloxquant::attention::kernels
