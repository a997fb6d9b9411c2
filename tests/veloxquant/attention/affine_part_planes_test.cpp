// palu's latent rows decoded in plane order (attention/affine_part_planes.h): the SIMD kernel
// against its scalar reference bit for bit, and both against an independent packer and decode
// (core::pack_dense, core::dequantize_group): every code at the layout's position times its
// part's scale, the (scale, min) pairs after the codes, and code + min equal to the group decode.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "veloxquant/attention/affine_part_planes.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(AffinePartPlanes, EqualsTheScalarReferenceAndTheGroupDecode) {
  std::mt19937 rng(5);
  const std::vector<std::vector<AffinePart>> layouts = {
      {{0, 16, 4}, {16, 32, 2}, {48, 16, 2}},                          // palu's default at rank 64
      {{0, 6, 4}, {6, 18, 2}},                                         // partial octets
      {{0, 16, 8}, {16, 7, 1}, {23, 40, 2}, {63, 1, 4}, {64, 33, 4}},  // every width, tails, > 4 parts
      {{0, 3, 1}},
  };
  for (const std::vector<AffinePart>& parts : layouts) {
    const int64_t n_parts = static_cast<int64_t>(parts.size());
    const AffinePlaneLayout layout = affine_plane_layout(parts.data(), n_parts);
    ASSERT_TRUE(layout.usable);
    ASSERT_EQ(layout.width % 8, 0);
    int64_t row_bytes = 0, components = 0;
    for (const AffinePart& p : parts) {
      row_bytes += affine_part_bytes(p);
      components += p.count;
    }
    // Rows with slack between them, filled with a pattern, so no read outside a part goes unseen.
    const int64_t stride = row_bytes + 3, n_rows = 11;
    std::vector<uint8_t> rows(static_cast<std::size_t>(stride * n_rows), 0xFF);
    std::vector<float> decoded(static_cast<std::size_t>(components * n_rows));
    std::vector<uint8_t> all_codes(static_cast<std::size_t>(components * n_rows));
    std::vector<core::GroupParams> params(parts.size() * static_cast<std::size_t>(n_rows));
    std::uniform_real_distribution<float> x(-3.0f, 3.0f);
    for (int64_t j = 0; j < n_rows; ++j) {
      uint8_t* row = rows.data() + j * stride;
      for (std::size_t p = 0; p < parts.size(); ++p) {
        std::vector<float> values(static_cast<std::size_t>(parts[p].count));
        for (float& v : values) v = x(rng);
        uint8_t* codes = all_codes.data() + j * components + parts[p].first;
        const core::GroupParams gp = core::quantize_group(values.data(), values.size(), 1, parts[p].bits, codes);
        params[static_cast<std::size_t>(j) * parts.size() + p] = gp;
        std::memcpy(row, &gp, 4);
        core::pack_dense(codes, values.size(), parts[p].bits, row + 4);
        core::dequantize_group(codes, values.size(), 1, gp, decoded.data() + j * components + parts[p].first);
        row += affine_part_bytes(parts[p]);
      }
    }
    const int64_t out_stride = layout.width + 8;
    std::vector<float> simd(static_cast<std::size_t>(out_stride * n_rows), -7.0f), plain = simd;
    const uint8_t* end = rows.data() + rows.size();
    decode_affine_part_planes(rows.data(), stride, n_rows, end, parts.data(), n_parts, layout, simd.data(), out_stride);
    scalar::decode_affine_part_planes(rows.data(), stride, n_rows, end, parts.data(), n_parts, layout, plain.data(),
                                      out_stride);
    ASSERT_EQ(simd, plain);
    // A buffer that ends right after the last row's parts: its partial octets take the copy.
    std::vector<float> tight(simd.size(), -7.0f);
    const std::vector<uint8_t> last_rows(rows.end() - stride - row_bytes - 3, rows.end() - 3);
    decode_affine_part_planes(last_rows.data(), stride, 2, last_rows.data() + last_rows.size(), parts.data(), n_parts,
                              layout, tight.data(), out_stride);
    for (int64_t e = 0; e < 2 * out_stride; ++e) {
      ASSERT_EQ(tight[static_cast<std::size_t>(e)], plain[static_cast<std::size_t>((n_rows - 2) * out_stride + e)]);
    }
    for (int64_t j = 0; j < n_rows; ++j) {
      const float* tile = plain.data() + j * out_stride;
      for (std::size_t p = 0; p < parts.size(); ++p) {
        uint16_t half[2];
        std::memcpy(half, &params[static_cast<std::size_t>(j) * parts.size() + p], 4);
        ASSERT_EQ(tile[layout.params + 2 * static_cast<int64_t>(p)], base::f16_to_f32(half[0]));
        ASSERT_EQ(tile[layout.params + 2 * static_cast<int64_t>(p) + 1], base::f16_to_f32(half[1]));
      }
      for (int64_t i = 0; i < components; ++i) {
        const std::size_t is = static_cast<std::size_t>(i);
        const int32_t p = layout.part_of[is];
        const float scale = tile[layout.params + 2 * static_cast<int64_t>(p)],
                    min = tile[layout.params + 2 * static_cast<int64_t>(p) + 1];
        ASSERT_EQ(tile[layout.position[is]],
                  static_cast<float>(all_codes[static_cast<std::size_t>(j * components + i)]) * scale)
            << "row " << j << " component " << i;
        ASSERT_EQ(tile[layout.position[is]] + min, decoded[static_cast<std::size_t>(j * components + i)]);
      }
      // The slack past the layout is untouched.
      for (int64_t e = layout.width; e < out_stride; ++e)
        ASSERT_EQ(simd[static_cast<std::size_t>(j * out_stride + e)], -7.0f);
    }
  }
}

TEST(AffinePartPlanes, OtherWidthsAreNotUsable) {
  const AffinePart three[] = {{0, 8, 3}};
  EXPECT_FALSE(affine_plane_layout(three, 1).usable);
  const AffinePart gap[] = {{0, 8, 2}, {9, 8, 2}};
  EXPECT_FALSE(affine_plane_layout(gap, 2).usable);
}

}  // namespace
}  // namespace veloxquant::attention::kernels
