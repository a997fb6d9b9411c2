#pragma once
// Two-stage 2-bit codebook keys (TurboQuant-RVQ's planar 2-bit rows) scored as integer dot
// products (Highway, dispatched at run time; each loop has a scalar reference it matches bit
// for bit).
//
// A key element is c1[i1] + c2[i2] with 2-bit indices from two code streams: one of 16 values,
// the same table for every channel. Decoding a tile to f32 and scoring it costs more per row
// than the native cache's f16 rows; here the 16 sums are rounded once to 16-bit integers with
// one step (levels16), each row's (i1, i2) pairs become a 4-bit index, two in-register byte
// lookups (vpshufb) give the 16-bit levels, and pairwise 16x16->32-bit multiply-adds score them
// against the query rounded to 16 bits:
//
//   score(r, j) = q_step[r] * level_step * sum_e q16[r][e] * level16[index_j(e)]
//
// Both roundings share the 32-bit budget of a row sum (d x |q16| x |level16| < 2^31): each
// gets sqrt((2^31 - 1) / d), 5792 for d = 64, a relative error of ~1e-4 of the largest element.
#include <cstdint>

namespace veloxquant::attention::kernels {

// The largest |q16| and |level16| for rows of `dim` elements: floor(sqrt((2^31 - 1) / dim)).
int32_t codebook_integer_limit(int64_t dim);

// The 16 two-stage sums c1[i1] + c2[i2] (i = 4 * i1 + i2; c2 == nullptr: c1[i1] alone) rounded
// to integers of one step: value[i] = round(sum / step), step = max |sum| / limit.
struct CodebookLevels16 {
  int16_t value[16];
  float step;
};
CodebookLevels16 codebook_levels16(const float* c1, const float* c2, int32_t limit);

// Whether rows of d 2-bit codes read by planes take score_codebook_rows (planes of whole
// 16-byte chunks).
bool can_score_codebook_rows(int64_t d);

// A query in code order (code_rows.h: position e' = k * P + p, P = d / 4) rounded to 16 bits in
// the order score_codebook_rows reads it: q16[lookup_position(e')] = round(q[e'] / step), step =
// max |q| / limit (0 for a zero query, NaN for a non-finite one).
void quantize_codebook_query(const float* q, int64_t d, int32_t limit, int16_t* q16, float* step);
int64_t codebook_lookup_position(int64_t position, int64_t d);

// Rows j < n_rows of two 2-bit code streams (s1, s2: plane_bytes = d / 4 bytes per row each,
// `row_stride` bytes apart; s2 == nullptr: one stage).
struct CodebookRows {
  const uint8_t* s1;
  const uint8_t* s2;
  int64_t row_stride, n_rows, d;
};
// n_q queries from quantize_codebook_query: query r is q16 + r * d, its step q_step[r].
struct CodebookQueries {
  const int16_t* q16;
  const float* q_step;
  int64_t n_q;
};

// The rows against the queries:
//   scores[r * ld + j] = (q_step[r] * levels.step) * float(sum_e' q16 * levels.value[index_j(e')]).
void score_codebook_rows(const CodebookRows& rows, const CodebookLevels16& levels, const CodebookQueries& queries,
                         float* scores, int64_t ld);

namespace scalar {
void score_codebook_rows(const CodebookRows& rows, const CodebookLevels16& levels, const CodebookQueries& queries,
                         float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
