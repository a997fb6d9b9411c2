#pragma once
// Key rows of word-layout codes (core/bit_packing.h: per = 32 / b codes to a u32 word, code i of
// a row in word i / per at bit b * (i % per)) scored straight from their words, without a gather
// or an f32 tile: the widths that do not read by planes (3, 5, 6, 7 bits; code_rows.h) went
// through unpack_word_rows (word_code_rows.h), one gather per 8 codes and a store, then an f32
// tile kernel that loaded them back — kvquant's and adakv's 3-bit keys spent most of their
// decode there.
//
// "Word planes": a row's words are loaded 8 at a time into the lanes of one vector (a masked
// load: lanes past the row's last word read as zero, nothing past it is touched), and plane p
// of that vector is (words >> b * p) & (2^b - 1) — code p of each of the 8 words. The query is
// put once per call into the same order, with zeros where a lane holds no code:
//
//   code-order position e = (v * per + p) * 8 + lane   <->   natural index (8 v + lane) * per + p
//
// (v the vector of 8 words), padding when word 8 v + lane is past the row or the index is past
// its codes. A row then costs, per plane, one shift, one mask, the level lookup (an in-register
// permute of the 2^b levels when they fit 8 lanes, else a gather; a conversion without levels)
// and one FMA per query; rows are reduced four at a time.
//
//   scores[r * ld + j] = sum_e folded[r * dim + e] * value(code_j(e)) + bias[r]
//   value(c) = levels[c] (levels != nullptr) or c
//
// The SIMD kernel and the scalar reference sum in the same order (8 lane sums of fused
// multiply-adds over (v, p), then ((l0 + l2) + (l1 + l3)) + ((l4 + l6) + (l5 + l7)), then the
// bias), so they agree bit for bit where the target has FMA (every x86 target with AVX2).
#include <cstdint>

namespace veloxquant::attention::kernels {

struct WordPlanes {
  int bits = 0;
  int per = 0;          // codes per word
  int64_t codes = 0;    // codes per row
  int64_t words = 0;    // words per row: ceil(codes / per)
  int64_t vectors = 0;  // groups of 8 words: ceil(words / 8)
  // Positions of the padded code order (the length of a folded query).
  int64_t dim() const { return vectors * per * 8; }
  // Natural index at code-order position e, or -1 for padding.
  int64_t natural(int64_t e) const {
    const int64_t v = e / (int64_t{8} * per), p = e / 8 % per, lane = e % 8;
    const int64_t word = v * 8 + lane, i = word * per + p;
    return word < words && i < codes ? i : -1;
  }
  // Code-order position of natural index i < codes (the inverse of natural()).
  int64_t position(int64_t i) const {
    const int64_t word = i / per, p = i % per;
    return (word / 8 * per + p) * 8 + word % 8;
  }
};

// The word-plane layout of rows of `codes` b-bit codes (1 <= b <= 8; b = 32 / per of any width).
WordPlanes word_planes(int bits, int64_t codes);

// The natural-order vector x (codes floats) into code order (dim() floats, zeros at padding).
void to_word_plane_order(const WordPlanes& planes, const float* x, float* out);

// Rows j < n_rows (words at first_row + j * row_stride_words) against n_q folded queries in code
// order (folded + r * dim(), zero at padding): the formula above. levels: nullptr or 2^b floats.
void score_word_planes(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, const WordPlanes& planes,
                       const float* levels, const float* folded, int64_t n_q, const float* bias, float* scores,
                       int64_t ld);

namespace scalar {
void score_word_planes(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, const WordPlanes& planes,
                       const float* levels, const float* folded, int64_t n_q, const float* bias, float* scores,
                       int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
