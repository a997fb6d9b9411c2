#pragma once
// Value sums straight from integer codes (kvtc's latent value rows, caches/latent_rows.h): a
// row's component i is lo_i + step_i c_i, so a query's weighted sum over rows j is
//   sum_j w_j (lo_i + step_i c_ji) = lo_i sum_j w_j + step_i sum_j w_j c_ji,
// and the second sum is an integer dot product once the weights are integers. Per query and per
// chunk of kCodeValueRows rows the weights are rounded to 16 bits of the chunk's largest one
// (W_j = round(w_j * 65535 / m), m = max_j w_j; weights are softmax numerators, >= 0), so
//   S_i = sum_j W_j c_ji          exact in int32 (65535 * 255 * 64 < 2^31)
//   acc_i += lo_i * (float(sum_j W_j) * u) + step_i * (float(S_i) * u),   u = m / 65535,
// each product and sum rounded apart. The weights keep 16 bits relative to the chunk's largest
// (f16 rows keep 11 per element); a chunk whose largest weight is below 1e-30 is skipped (the
// running softmax holds a weight of 1, so its share is below f32 resolution).
//
// On CPUs with AMX-INT8 (and the OS's leave to use the tile registers: attention/amx_tiles.h,
// whose one 16 x 64 tile configuration this kernel shares with the key scores) the sums are
// tile multiply-adds (tdpbuud: the weights' high and low bytes as two 16 x 64 A tiles, the codes
// of 4 rows interleaved per component as B tiles, 16 x 16 x 64 unsigned byte products each):
// 1024 multiply-adds per instruction against an f32 FMA's 16. The integer sums are exact, so the
// AMX path equals the scalar reference below bit for bit; elsewhere the reference runs, and
// callers keep their f32 latent path there (code_value_sums_fast(); the environment variable
// VQ_DISABLE_AMX=1 makes it false, so one binary can be measured both ways).
#include <cstdint>

#include "veloxquant/attention/row_source.h"

namespace veloxquant::attention::kernels {

inline constexpr int64_t kCodeValueRows = 64;

// Whether accumulate_code_values runs on AMX tiles here (CPU and OS).
bool code_value_sums_fast();

// A tile of code rows: codes[j * stride + i] (each 0..255) for rows j < n_rows and components
// i < r (stride a multiple of 64, >= r; r <= 256); component i decodes as lo[i] + step[i] * c.
struct CodeValueRows {
  const uint8_t* codes;
  int64_t stride, n_rows, r;
  const float* step;
  const float* lo;
};

// acc[q * acc_stride + i] += the sum above for q < w.n_queries, i < rows.r, over the rows, with
// weights w.weights[q * w.ld + j]. Chunks of kCodeValueRows rows from row 0, each with its own
// per-query scale.
void accumulate_code_values(const TileWeights& w, const CodeValueRows& rows, float* acc, int64_t acc_stride);

namespace scalar {
void accumulate_code_values(const TileWeights& w, const CodeValueRows& rows, float* acc, int64_t acc_stride);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
