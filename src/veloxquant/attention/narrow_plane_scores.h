#pragma once
// Planar b-bit codes whose plane is not whole chunks of the integer key kernel
// (integer_key_scores.h) scored by that kernel all the same: kitty's 16 high channels at 4 bits
// and 48 low ones at 2 bits make planes of 8 and 12 bytes, where the kernel widens 16 at once.
//
// Each row is read as a plane of `padded` bytes (plane_bytes rounded up to whole chunks). The
// bytes past a row's own plane are whatever follows it in memory (normally the next row's
// codes); the integer query is zero at those positions, so they add exactly nothing and the
// integer sum is the same as over the row alone. Code-order position e = k * padded + p (k <
// 8 / b, p < padded) holds natural index p * (8 / b) + k when that is below the row's code count,
// padding otherwise (the fields past the last code of a row's last byte must be zero, as the word
// and dense layouts of core/bit_packing.h leave them; the query is zero there too).
// Rows whose padded read would pass the end of the codes' buffer are copied into a zeroed row
// first, so no read leaves the buffer.
#include <cstdint>

#include "veloxquant/attention/integer_key_scores.h"

namespace veloxquant::attention::kernels {

struct NarrowPlane {
  int bits = 0;
  int64_t codes = 0;        // codes per row
  int64_t plane_bytes = 0;  // a row's own bytes: ceil(codes * bits / 8)
  int64_t padded = 0;       // bytes read per row: plane_bytes rounded up to whole chunks; 0 = not scorable
  // Positions of the padded code order (the length of an integer query).
  int64_t dim() const { return padded * (8 / bits); }
  // Natural index at code-order position e, or -1 for padding.
  int64_t natural(int64_t e) const {
    const int64_t k = e / padded, p = e % padded;
    const int64_t i = p * (8 / bits) + k;
    return p < plane_bytes && i < codes ? i : -1;
  }
  // Code-order position of natural index i < codes (the inverse of natural()).
  int64_t position(int64_t i) const { return i % (8 / bits) * padded + i / (8 / bits); }
};

// The padded layout of rows of `codes` b-bit codes (packed LSB-first, as the word layout for
// b in {2, 4, 8}); padded == 0 unless b is 2, 4 or 8.
NarrowPlane narrow_plane(int bits, int64_t codes);

// score_codes_i16 over rows j < n_rows `row_stride` bytes apart (row_stride >= plane_bytes), read
// padded; query r at q16 + r * dim(), in padded code order with zeros at padding. `readable_end`
// is one past the last byte the rows' buffer holds.
void score_narrow_codes_i16(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, const NarrowPlane& plane,
                            const uint8_t* readable_end, const IntegerQueries& queries, float* scores, int64_t ld);

}  // namespace veloxquant::attention::kernels
