#pragma once
// Group-affine keys scored as integer dot products (Highway, dispatched at run time; each loop
// has a plain scalar reference that the SIMD one matches bit for bit).
//
// A group-affine key row's score is folded . codes + bias (the query folded into the key group's
// per-channel scales, the mins a per-query bias), with small unsigned integer codes. Scoring it in f32 means widening
// every code to a float and one FMA per code and query — more work per row than the native cache's f16 rows. Here the
// folded query is rounded once per key group to 16-bit integers with one f32 step per query,
// and a row costs pairwise 16x16->32-bit multiply-adds (vpmaddwd: 16 products per instruction
// on AVX2, twice an f32 FMA's 8) straight from the widened code bytes:
//
//   score(r, j) = step[r] * sum_e q16[r][e] * code_j(e) + bias[r]
//
// The integer sum is exact. The only new error is the query's rounding, |folded - step * q16|
// <= step / 2 per element with step = max|folded| / limit, limit >= 16383: a relative error of
// about 3e-5 of the largest folded element, far below the codes' own quantization error.
#include <cstdint>

namespace veloxquant::attention::kernels {

// The largest |q16| for rows of `dim` codes of `bits` bits, so the 32-bit sum cannot overflow:
// min(32767, (2^31 - 1) / ((2^bits - 1) * dim)).
int32_t integer_query_limit(int bits, int64_t dim);

// A key group's scales folded into n_q queries and rounded to integers, with the mins' bias:
// folded = q[r * d + c] * scale[c], q16[r * d + c] = round(folded / step[r]) with step[r] = max_c
// |folded| / limit (0 for an all-zero row, NaN when a folded value is not finite), and
// bias[r] = sum_c q[r * d + c] * min[c].
void fold_queries_i16(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, int32_t limit,
                      int16_t* q16, float* step, float* bias);

// Whether rows of planar b-bit codes with `plane_bytes` bytes per plane take score_codes_i16.
bool can_score_codes_i16(int bits, int64_t plane_bytes);
// Bytes score_codes_i16 widens at once (a plane is read in whole chunks of this many bytes; 1 on
// the scalar target). narrow_plane_scores.h reads planes of other widths padded to it.
int64_t integer_chunk_bytes();

// Rows j < n_rows of planar b-bit codes (code_rows.h: plane k of a row is the k-th b-bit field
// of its first plane_bytes bytes; code-order position e' = k * plane_bytes + p), `row_stride`
// bytes apart.
struct PlaneCodeRows {
  const uint8_t* bytes;
  int64_t row_stride;
  int64_t n_rows;
  int64_t plane_bytes;
  int bits;
};

// n_q queries as fold_queries_i16 leaves them: query r's integers at q16 + r * d, its step[r]
// and bias[r].
struct IntegerQueries {
  const int16_t* q16;
  const float* step;
  const float* bias;
  int64_t n_q;
};

// The rows against the integer queries in code order (d = 8 / b * plane_bytes):
//   scores[r * ld + j] = step[r] * float(sum_e' q16[r][e'] * code_j(e')) + bias[r].
void score_codes_i16(const PlaneCodeRows& rows, const IntegerQueries& queries, float* scores, int64_t ld);

namespace scalar {
void fold_queries_i16(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, int32_t limit,
                      int16_t* q16, float* step, float* bias);
void score_codes_i16(const PlaneCodeRows& rows, const IntegerQueries& queries, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
