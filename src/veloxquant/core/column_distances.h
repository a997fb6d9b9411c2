#pragma once
// Squared Euclidean distances in double from one point to many points stored as columns
// (cols[k * ld + c] is coordinate k of point c), in SIMD (Highway, dispatched at run time) with
// a plain scalar reference they match bit for bit. a2ats's codebook (core::kmeans's assignment
// steps and k-means++ seeding, and the encoder of every row that leaves the window) spends its
// time here; the scalar double loops ran two lanes wide (SSE2) and scanned the distances with one
// branch per centroid.
//
// Every distance is formed as core::nearest_centroid forms it, in this order for each column c:
//   d = 0;  diff = double(v[k]) - double(cols[k * ld + c]);  d = d + diff * diff  for k = 0..dim-1
// (a multiply, then an add: the file is compiled with -ffp-contract=off). (a - b)^2 and
// (b - a)^2 are the same double, so the point may stand on either side.
#include <cstdint>

namespace veloxquant::core {

// The lowest index of the smallest distance from v (dim floats) to columns [0, count) (strict <
// in index order, as core::nearest_centroid); 0 when no distance is below +inf.
int32_t nearest_column(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld);

// out[c] = the distance from v to column c, c < count.
void column_distances(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld, double* out);

namespace scalar {
int32_t nearest_column(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld);
void column_distances(const float* v, const float* cols, int64_t count, int64_t dim, int64_t ld, double* out);
}  // namespace scalar

}  // namespace veloxquant::core
