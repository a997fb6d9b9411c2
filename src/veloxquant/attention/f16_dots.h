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

namespace scalar {
void f16_dots(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
              int64_t n, float* out);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
