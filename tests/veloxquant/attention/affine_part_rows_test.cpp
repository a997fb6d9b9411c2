// palu's latent-row decoder: the SIMD kernel against its scalar reference bit for bit, and the
// reference against core::pack_dense + core::dequantize_group (an independent packer and the
// group quantizer's own decode), for every width, parts that leave scalar tails, and row strides
// with slack.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "veloxquant/attention/affine_part_rows.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(AffinePartRows, EqualsTheScalarReferenceAndTheGroupDecode) {
  std::mt19937 rng(11);
  for (int bits = 1; bits <= 8; ++bits) {
    // Parts of several lengths (full vectors, tails, a single code), the second at another width.
    const std::vector<AffinePart> parts = {
        {0, 16, bits}, {16, 7, bits}, {23, 32, bits == 8 ? 2 : bits + 1}, {55, 1, bits}, {56, 13, bits}};
    int64_t row_bytes = 0, width = 0;
    for (const AffinePart& p : parts) {
      row_bytes += affine_part_bytes(p);
      width = p.first + p.count;
    }
    const int64_t stride = row_bytes + 5, n_rows = 9;
    std::vector<uint8_t> rows(static_cast<std::size_t>(stride * n_rows), 0xA5);
    std::vector<float> expected(static_cast<std::size_t>(width * n_rows));
    std::uniform_real_distribution<float> x(-2.0f, 2.0f);
    for (int64_t j = 0; j < n_rows; ++j) {
      uint8_t* row = rows.data() + j * stride;
      for (const AffinePart& p : parts) {
        std::vector<float> values(static_cast<std::size_t>(p.count));
        for (float& v : values) v = x(rng);
        std::vector<uint8_t> codes(static_cast<std::size_t>(p.count));
        const core::GroupParams params = core::quantize_group(values.data(), values.size(), 1, p.bits, codes.data());
        std::memcpy(row, &params, 4);
        core::pack_dense(codes.data(), codes.size(), p.bits, row + 4);
        core::dequantize_group(codes.data(), codes.size(), 1, params, expected.data() + j * width + p.first);
        row += affine_part_bytes(p);
      }
    }
    std::vector<float> simd(expected.size(), -1.0f), plain(expected.size(), -2.0f);
    decode_affine_part_rows(rows.data(), stride, n_rows, parts.data(), static_cast<int64_t>(parts.size()), simd.data(),
                            width);
    scalar::decode_affine_part_rows(rows.data(), stride, n_rows, parts.data(), static_cast<int64_t>(parts.size()),
                                    plain.data(), width);
    ASSERT_EQ(simd, plain) << "bits " << bits;
    ASSERT_EQ(plain, expected) << "bits " << bits;
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
