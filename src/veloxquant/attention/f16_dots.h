#pragma once
// A few short dot products of f16 rows with f32 vectors at once (Highway, dispatched at run time,
// with a scalar reference it matches bit for bit): GEAR's low-rank terms (caches/low_rank_rows.h)
// need, per block of rows, each query projected on the block's rank right factors and each
// query's weights summed against the rank left factors — rank x queries products of 32-64
// elements. One dot_f16 call per product spent ~75 instructions on dispatch, setup and a full
// horizontal sum each; here every chunk of 8 elements of a factor row is widened once for all
// queries, and the sums are reduced four at a time.
//
//   out[r * rank + i] = sum_c f16(a[i * a_stride + c]) * x[r * x_stride + c]   (i < rank, r < n_x)
//
// Order (kernel and reference): 8 lane sums of fused multiply-adds over the whole chunks, reduced
// ((l0 + l2) + (l1 + l3)) + ((l4 + l6) + (l5 + l7)), then the elements past the last whole chunk
// added one by one in order.
#include <cstdint>

namespace veloxquant::attention::kernels {

void f16_dots(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
              int64_t n, float* out);

// The other half of a low-rank term: rank f16 rows mixed into n_out f32 rows by their coefficients,
//
//   out[r * out_stride + t] += sum_i coef[r * rank + i] * f16(a[i * a_stride + t])   (t < n, r < n_out)
//
// (GEAR's key scores: the queries' projections times the left factors over a block's rows; its
// values: the weighted left sums times the right factors over the channels). Each chunk of 8 of a
// factor row is widened once for all output rows. It replaced the generic multi-row tile kernel
// (~440 instructions per 32-row block for rank 2 and three queries, plus its f16 dispatch).
// Order (kernel and reference): per element, one fused multiply-add per factor row i, i ascending,
// onto the element's old value.
void f16_rank_update(const float* coef, int64_t rank, int64_t n_out, const uint16_t* a, int64_t a_stride, int64_t n,
                     float* out, int64_t out_stride);

// One head's low-rank terms (GEAR, caches/low_rank_rows.h), block by block over rows [j0, j1) of
// a tile, in one call: block g (rows [g G, (g + 1) G)) holds terms[g * terms_stride + field + 1]
// terms (capped at min(G, the other side's length)) starting at stored term
// terms[g * terms_stride + field]; term i has a left row over the block's G rows
// (left + i * left_stride) and a right row over the channels (right + i * right_stride).
struct LowRankTerms {
  const int32_t* terms;
  int64_t terms_stride, field;
  const uint16_t* left;
  int64_t left_stride;
  const uint16_t* right;
  int64_t right_stride;
  int64_t group;
};
// Keys: per block, the queries' projections on the right rows (f16_dots, q_stride apart, d long,
// into `projection`: n_q * min(G, d) floats), then scores[r * ld + (t - j0)] += the projections
// times the left rows (f16_rank_update).
void low_rank_scores(const LowRankTerms& keys, int64_t j0, int64_t j1, const float* q, int64_t q_stride, int64_t d,
                     int64_t n_q, float* scores, int64_t ld, float* projection);
// Values: per block, the weights' sums against the left rows over the tile's rows of the block
// (f16_dots, into `coefficient`: n_q * min(G, dv) floats), then acc[r * dv + c] += those times the
// right rows (f16_rank_update).
void low_rank_values(const LowRankTerms& values, int64_t j0, int64_t j1, const float* weights, int64_t ld, int64_t n_q,
                     int64_t dv, float* acc, float* coefficient);

namespace scalar {
void low_rank_scores(const LowRankTerms& keys, int64_t j0, int64_t j1, const float* q, int64_t q_stride, int64_t d,
                     int64_t n_q, float* scores, int64_t ld, float* projection);
void low_rank_values(const LowRankTerms& values, int64_t j0, int64_t j1, const float* weights, int64_t ld, int64_t n_q,
                     int64_t dv, float* acc, float* coefficient);
void f16_rank_update(const float* coef, int64_t rank, int64_t n_out, const uint16_t* a, int64_t a_stride, int64_t n,
                     float* out, int64_t out_stride);
void f16_dots(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
              int64_t n, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
