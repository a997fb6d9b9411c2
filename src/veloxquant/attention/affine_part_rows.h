#pragma once
// Rows of per-token group-affine parts (palu's latent rows, caches/palu_cache.cpp) decoded to f32
// for the attention driver's tile kernels (Highway, dispatched at run time, once per tile).
//
// A row is a sequence of parts; part p is 4 bytes of f16 (scale, min) (core::GroupParams), then
// ceil(count * bits / 8) bytes of its codes packed densely, least significant bits first
// (core::pack_dense: code i at bit i * bits). Each code decodes to float(code) * scale + min (a
// multiply and an add, never fused: core::dequantize_group's arithmetic, so the kernel equals the
// scalar reference bit for bit). Widths 1, 2, 4 and 8 take the SIMD path — a vector's codes read
// from one 32-bit window of the stream, shifted per lane and masked; other widths one code at a
// time.
#include <cstdint>

namespace veloxquant::attention::kernels {

// One part of a row: components [first, first + count) at `bits` (1..8) bits.
struct AffinePart {
  int64_t first = 0, count = 0;
  int bits = 0;
};

// Bytes part `p` takes in a row: 4 + ceil(count * bits / 8).
inline int64_t affine_part_bytes(const AffinePart& p) { return 4 + (p.count * p.bits + 7) / 8; }

// out[j * out_stride + parts[i].first + c] for rows j < n_rows (row j at first_row + j * row_stride
// bytes) and every code c of every part.
void decode_affine_part_rows(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const AffinePart* parts,
                             int64_t n_parts, float* out, int64_t out_stride);

namespace scalar {
void decode_affine_part_rows(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const AffinePart* parts,
                             int64_t n_parts, float* out, int64_t out_stride);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
