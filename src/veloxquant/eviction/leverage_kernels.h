#pragma once
// The O(n^2)-per-step loops of curdkv's leverage scores (leverage_scores.cpp), in SIMD across an
// index whose sums stay independent, so every sum keeps the scalar loop's terms and order (a
// multiply, then an add: the file is built without FMA contraction) and the results are the
// scalar loops' bit for bit:
//   - the energy of each row in the top-k eigen-subspace: lanes across the k eigenvectors;
//   - the Householder reduction's B v and its rank-2 update: lanes across rows of B (B is exactly
//     symmetric, so B v is an accumulation of B's rows scaled by v's entries, column order kept).
// Scalar definitions in namespace scalar (what tests compare against).
#include <cstdint>

namespace veloxquant::eviction {

// energy[j] = sum over t < k of (sum over i < dim of rows[j * dim + i] * vectors[t * dim + i])^2,
// the inner sums over i in order, the outer over t in order.
void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy);

// p[i] = sum over j in [from, n) of a[i * n + j] * v[j], for i in [from, n); `a` (n x n,
// row-major) must be exactly symmetric on [from, n) x [from, n).
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p);

// a[i * n + j] -= v[i] * w[j] + w[i] * v[j] for i, j in [from, n).
void symmetric_rank2_update(double* a, int64_t n, int64_t from, const double* v, const double* w);

namespace scalar {
void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy);
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p);
void symmetric_rank2_update(double* a, int64_t n, int64_t from, const double* v, const double* w);
}  // namespace scalar

}  // namespace veloxquant::eviction
