#pragma once
// palu's latent rows (the part layout of affine_part_rows.h) decoded for the attention driver in
// *plane order*: the order the codes come out of their bytes by whole-vector shifts, no shuffles
// and no per-code window reads (Highway, dispatched at run time, with a plain scalar reference the
// kernel equals bit for bit).
//
// Part p (bits b in 1, 2, 4, 8; B = ceil(count * b / 8) code bytes) is read in octets of 8 bytes;
// octet o holds F = 8 / b fields per byte. Its tile floats start at offset(p):
//
//   tile[offset(p) + (o * F + k) * 8 + l] = scale_p * code(o * 8 + l, field k)
//
// which is the code of natural component (o * 8 + l) * F + k of the part (dense LSB-first
// packing, core::pack_dense: code i sits in byte i / F at field i % F). Positions past the part's
// codes (the last octet's lanes beyond B, or fields past `count`) hold scale_p * 0 or scale_p *
// (a field of a zero byte): they are padding, and the readers give them a zero weight. After the
// parts come the parameters, 2 floats per part padded to a multiple of 8:
//
//   tile[params + 2p] = scale_p,  tile[params + 2p + 1] = min_p      (f16 header widened exactly)
//
// so that a row's value is sum over parts of scale_p * codes + min_p: a key score is the dot of
// the tile row with a query laid out the same way (the projected query at its codes' positions,
// the part's query sum at min_p's slot, zero elsewhere), and the sum of weighted value rows holds
// the weighted codes and, at each min slot, the weighted sum of the mins (natural component i of
// part p = tile[position(i)] + tile[params + 2p + 1]).
//
// Each float is float(code) * scale (one multiply, exact as in core::dequantize_group before its
// add), so the kernel and the reference agree bit for bit.
#include <cstdint>
#include <vector>

#include "veloxquant/attention/affine_part_rows.h"

namespace veloxquant::attention::kernels {

struct AffinePlaneLayout {
  bool usable = false;               // every part at 1, 2, 4 or 8 bits (else: decode_affine_part_rows)
  int64_t width = 0;                 // floats per tile row (a multiple of 8)
  int64_t params = 0;                // offset of the (scale, min) pairs
  std::vector<int64_t> part_offset;  // tile offset of part p's planes
  std::vector<int32_t> position;     // natural component -> tile position (components of all parts)
  std::vector<int32_t> part_of;      // natural component -> its part
};

AffinePlaneLayout affine_plane_layout(const AffinePart* parts, int64_t n_parts);

// Rows j < n_rows (row j at first_row + j * row_stride) into out + j * out_stride (width floats
// each). A part's last, partial octet is read whole when its 8 bytes end by `readable_end` (one
// past the last byte of the rows' buffer) and the bytes past the part are zeroed in registers;
// nearer the end they are copied. The result counts only the parts' own bytes either way.
void decode_affine_part_planes(const uint8_t* first_row, int64_t row_stride, int64_t n_rows,
                               const uint8_t* readable_end, const AffinePart* parts, int64_t n_parts,
                               const AffinePlaneLayout& layout, float* out, int64_t out_stride);

namespace scalar {
void decode_affine_part_planes(const uint8_t* first_row, int64_t row_stride, int64_t n_rows,
                               const uint8_t* readable_end, const AffinePart* parts, int64_t n_parts,
                               const AffinePlaneLayout& layout, float* out, int64_t out_stride);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
