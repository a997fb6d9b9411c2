#pragma once
// Double-precision sums of cam's key similarity and nestedkv's anchor scores, each summed in the
// order the scalar loops they replace summed it, a multiply then an add per term (the file is
// built without FMA contraction): so their scores, and the rows the two methods keep, are what
// the scalar loops gave, bit for bit. The SIMD (Highway, dispatched at run time) runs across
// independent sums — one row per lane for a dot product along a row, one element per lane for
// a sum over rows — never reassociating one sum; rows reach the lanes by transposing blocks in
// registers (gathers are slow on this machine: microcode-mitigated). Those scalar loops made
// cam's prefill 0.70x and nestedkv's decode 0.57x the native cache's at 4k (latency-bound: one
// add at a time). The scalar versions (namespace scalar) are the reference every target is
// tested against.
#include <cstdint>

namespace veloxquant::eviction {

// out[j] = sum over e < dim of double(rows[index[j] * dim + e]) * double(v[e]), for j < count
// (cam: the victim's key against every live key).
void indexed_row_dots(const float* rows, const int32_t* index, int64_t count, int64_t dim, const float* v, double* out);

// nestedkv's anchors (anchor_scores.cpp), in the order of scalar::nested_anchor_scores. Key i is
// keys + r_i * dim, r_i = rows ? rows[i] : i; its unit key u_i[e] = double(k_i[e]) * inv[i].

// columns[e * stride + i] = double(k_i[e]) and norms[i] = the sum over e of k_i[e]^2.
void key_columns_and_norms(const float* keys, const int32_t* rows, int64_t count, int64_t dim, double* columns,
                           int64_t stride, double* norms);

// total[e] = sum over i of u_i[e]; block_sums[b * dim + e] = the same over keys [b * block,
// (b + 1) * block), the last block short.
void unit_sums(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const double* inv, int64_t block,
               double* total, double* block_sums);

// For i in [begin, end), u_i read from key_columns_and_norms's columns times inv[i]:
// out1[i] = sum over e of u_i[e] * v1[e], out2[i] the same with v2.
void unit_column_dots(const double* columns, int64_t stride, const double* inv, int64_t begin, int64_t end, int64_t dim,
                      const double* v1, const double* v2, double* out1, double* out2);

// out[i] = sum over e of u_i[e] * (running_i[e] / min(i + 1, window)), running_i the running sum
// of the unit keys of the window ending at i, each step adding u_i, then subtracting
// u_{i - window}. `running` is dim scratch doubles, `products` 8 x dim (at least the SIMD lanes
// of doubles x dim).
void recent_anomalies(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const double* inv,
                      int64_t window, double* running, double* products, double* out);

namespace scalar {
void indexed_row_dots(const float* rows, const int32_t* index, int64_t count, int64_t dim, const float* v, double* out);
}  // namespace scalar

}  // namespace veloxquant::eviction
