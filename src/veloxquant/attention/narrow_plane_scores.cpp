#include "veloxquant/attention/narrow_plane_scores.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "veloxquant/attention/integer_key_scores.h"

namespace veloxquant::attention::kernels {

NarrowPlane narrow_plane(int bits, int64_t codes) {
  NarrowPlane plane;
  if ((bits != 2 && bits != 4 && bits != 8) || codes <= 0) return plane;
  const int64_t chunk = integer_chunk_bytes();
  plane.bits = bits;
  plane.codes = codes;
  plane.plane_bytes = (codes * bits + 7) / 8;
  plane.padded = (plane.plane_bytes + chunk - 1) / chunk * chunk;
  return plane;
}

void score_narrow_codes_i16(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, const NarrowPlane& plane,
                            const uint8_t* readable_end, const IntegerQueries& queries, float* scores, int64_t ld) {
  if (n_rows <= 0) return;
  // Rows whose padded read stays inside the buffer are read in place (normally all but the
  // buffer's last row or two).
  const int64_t room = readable_end - bytes - plane.padded;  // row j reads in place iff j * row_stride <= room
  const int64_t direct = room < 0 ? 0 : std::min(n_rows, room / row_stride + 1);
  if (direct > 0) {
    score_codes_i16({bytes, row_stride, direct, plane.padded, plane.bits}, queries, scores, ld);
  }
  if (direct == n_rows) return;
  // The rest through zero-padded copies (grow-only per thread: no allocation once warm).
  thread_local std::vector<uint8_t> copies;
  const int64_t rest = n_rows - direct;
  copies.assign(static_cast<std::size_t>(rest * plane.padded), 0);
  for (int64_t j = 0; j < rest; ++j) {
    std::memcpy(copies.data() + j * plane.padded, bytes + (direct + j) * row_stride,
                static_cast<std::size_t>(plane.plane_bytes));
  }
  score_codes_i16({copies.data(), plane.padded, rest, plane.padded, plane.bits}, queries, scores + direct, ld);
}

}  // namespace veloxquant::attention::kernels
