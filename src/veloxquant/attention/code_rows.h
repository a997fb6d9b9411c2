#pragma once
// Rows of packed b-bit codes (the word layout of core/bit_packing.h, one row per token) read
// as f32 code values for the tile kernels, in a fixed per-(bits, n) order.
//
// For b in {1, 2, 4, 8} with n * b a multiple of 32 the word layout is a plain little-endian
// bit stream, and a row is read by planes (tile_kernels.h, unpack_planes): position e' = k * P + p
// (P = n * b / 8 bytes, k < 8 / b) holds natural index p * (8 / b) + k. Scoring does not care
// about the order as long as the query is permuted alike (code order), and accumulated values
// are put back in natural order once per tile. Other widths read in natural order.
#include <cstdint>
#include <vector>

namespace veloxquant::attention {

class CodeOrder {
 public:
  // A maximal run of code-order positions [start, start + length) whose natural indices lie in
  // one channel group and step evenly (group-affine rows scale a run with one (scale, min)).
  struct Run {
    int64_t start, length, group;
  };
  // `group` > 0: the channel-group size of group-affine rows (runs() is then filled).
  CodeOrder(int bits, int64_t n, int64_t group = 0);
  const std::vector<Run>& runs() const { return runs_; }
  // Whether (bits, n) rows read by planes.
  static bool is_planar(int bits, int64_t n) {
    return (bits == 1 || bits == 2 || bits == 4 || bits == 8) && (n * bits) % 32 == 0;
  }
  int bits() const { return bits_; }
  int64_t size() const { return n_; }
  bool planar() const { return planar_; }
  int64_t words_per_row() const { return words_; }
  // Natural index of code-order position e'.
  int64_t natural(int64_t position) const { return natural_[static_cast<std::size_t>(position)]; }
  const std::vector<int32_t>& natural_indices() const { return natural_; }
  // Rows [0, n_rows) of packed words `words_per_row` apart into f32 codes in code order,
  // out[j * size() + e'].
  void unpack_rows(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, float* out) const;
  // x (natural order, n floats) into code order.
  void permute(const float* natural_order, float* code_order) const;
  // natural_order[natural(e')] += code_order[e'] for every position (SIMD interleave of the
  // planes when planar).
  void add_to_natural(const float* code_order, float* natural_order) const;

 private:
  int bits_;
  int64_t n_;
  bool planar_;
  int64_t words_;
  std::vector<int32_t> natural_;
  std::vector<Run> runs_;
};

}  // namespace veloxquant::attention
