#pragma once
// Key scores straight from integer codes (kvtc's latent rows): a row's latent component i is
// lo_i + step_i c_i, so a projected query p scores it as
//   sum_i p_i lo_i + sum_i (p_i step_i) c_i,
// a constant per query plus an integer dot product once p_i step_i is rounded to 16 bits per
// query (a_i = round((p_i step_i) / scale), scale = max |p_i step_i| / A, A = 32767, or less
// where 255 A code_stride would pass the int32 sums: 43,862 > 32767 at 192 codes). On AVX-512 VNNI
// (the AVX3_DL target) that is one vpdpwssd per 32 codes — 32 multiply-adds against the 16 of
// an f32 FMA, with no float decode of the key rows at all. The integer sums are exact, so every
// target gives the same scores (the scalar reference below).
//
// Prepared query layout (floats, prepared_stride apart): [scale, offset, then code_stride int16
// a_i packed two per float]; score = float(sum_i a_i c_i) * scale + offset, rounded after the
// multiply and after the add.
#include <cstdint>

namespace veloxquant::attention::kernels {

// Floats of a prepared query for code rows of code_stride (a multiple of 32) codes.
inline int64_t code_query_floats(int64_t code_stride) { return 2 + code_stride / 2; }

// projected: r floats; step, lo: r each. Writes code_query_floats(code_stride) floats.
void prepare_code_query(const float* projected, const float* step, const float* lo, int64_t r, int64_t code_stride,
                        float* prepared);

// scores[q * ld + j] for q < n_q, j < n_rows; codes: n_rows rows of code_stride int16 (each
// 0..255), code_stride a multiple of 32.
void score_code_rows(const float* prepared, int64_t prepared_stride, int64_t n_q, const int16_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld);

namespace scalar {
void score_code_rows(const float* prepared, int64_t prepared_stride, int64_t n_q, const int16_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
