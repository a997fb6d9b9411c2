#pragma once
// Product VQ's per-query lookup tables (caches/product_vq.h: LUT[t][k] = <q_t, c_k>) built and read
// in SIMD (Highway, dispatched at run time), each loop matching its scalar reference bit for bit.
//
// Building: a table row is <q_t, c_k> for every entry k of book t, summed over the sub-vector's
// coordinates in order from 0 with a multiply then an add (product_vq.cpp's loop). Over the book
// stored transposed ([sub][entries], the encoder's search table) a vector holds consecutive
// entries and each coordinate is one multiply and one add for all of them: comm_vq builds 4 x 256
// entries x 16 coordinates per query every step, which the entry-at-a-time loop spent ~1/6 of its
// attention on.
//
// Reading: comm_vq's default rows are 4 codes of 8 bits, one 32-bit word per row. A vector of rows
// is loaded as words, each code turned into its table offset in-register and gathered from each
// query's table, the four terms added in code order from 0 as lut_score does.
#include <cstdint>

namespace veloxquant::pvq {

// out[k] = sum_e q[e] * transposed[e * entries + k] (e = 0..sub-1 in order, from 0), k < entries.
void lut_from_columns(const float* transposed, int64_t entries, int sub, const float* q, float* out);

// Rows of exactly 4 8-bit codes, row j's codes in the 4 bytes at codes + 4 * j (j < n_rows), scored
// against n_q tables (query r's at luts + r * lut_stride, 4 x 256 floats):
//   scores[r * ld + j] = ((((0 + L[c0]) + L[256 + c1]) + L[512 + c2]) + L[768 + c3]).
void score_lut_rows_4x8(const uint8_t* codes, int64_t n_rows, const float* luts, int64_t lut_stride, int64_t n_q,
                        float* scores, int64_t ld);

namespace scalar {
void lut_from_columns(const float* transposed, int64_t entries, int sub, const float* q, float* out);
void score_lut_rows_4x8(const uint8_t* codes, int64_t n_rows, const float* luts, int64_t lut_stride, int64_t n_q,
                        float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::pvq
