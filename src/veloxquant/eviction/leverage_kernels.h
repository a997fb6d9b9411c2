#pragma once
// The O(n^2)-per-step loops of curdkv's leverage scores (leverage_scores.cpp), in SIMD across an
// index whose sums stay independent, so every sum keeps the scalar loop's terms and order (a
// multiply, then an add: the file is built without FMA contraction; the subspace energy fuses
// them on FMA targets, as its scalar twin does) and the results are the scalar loops' bit for bit:
//   - the energy of each row in the top-k eigen-subspace: lanes across the k eigenvectors;
//   - the Householder reduction's B v and its rank-2 update: lanes across columns of B (B is exactly
//     symmetric, so B v is an accumulation of B's rows scaled by v's entries, row order kept), the
//     update and the next step's B v in one pass over the rows;
//   - carrying the k eigenvectors back through the reflectors: lanes across the vectors.
// Scalar definitions in namespace scalar (what tests compare against).
#include <cstdint>

namespace veloxquant::eviction {

// out[j * dim + i] = double(weights[j]) * values[row_j * dim + i] (row_j = rows[j], or j when rows
// is null): the attention-weighted value block, exact in double (a product of two floats fits).
// Returns whether any entry's square is nonzero (whether |M|_F^2 > 0).
bool weighted_rows(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                   double* out);

// energy[j] = sum over t < k of (sum over i < dim of rows[j * dim + i] * vectors[t * dim + i])^2,
// the inner sums over i in order, the outer over t in order. The inner sums take one fused
// multiply-add per term on targets with FMA (AVX2, AVX3; subspace_energy_fuses()): a change at
// double rounding (~1e-16 of a score), far below the float the scores are kept in, for half the
// instructions of the loop that bounds this kernel.
void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy);
// Whether the dispatched target's subspace_energy fuses each multiply-add (its scalar reference is
// then scalar::subspace_energy_fused).
bool subspace_energy_fuses();

// p[i] = sum over j in [from, n) of a[i * n + j] * v[j], for i in [from, n); `a` (n x n,
// row-major) must be exactly symmetric on [from, n) x [from, n).
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p);

// a[i * n + j] -= v[i] * w[j] + w[i] * v[j] for rows i in [row_begin, row_end) and columns j in
// [col_begin, n); then, when next_v is given, p[j] = sum over those rows i in order of the updated
// a[i * n + j] * next_v[i], j in [col_begin, n): the next Householder step's B v in the same pass
// over B (its rows are read once, not twice). v, w and next_v may be read anywhere in [0, n) (they
// must be finite there); nothing outside the rows and columns named is written.
void rank2_update_rows(double* a, int64_t n, int64_t row_begin, int64_t row_end, int64_t col_begin, const double* v,
                       const double* w, const double* next_v, double* p);

// Every column x of `columns` (n rows x `stride` doubles; column c < count is one vector, its
// component i in row i) becomes H_0 H_1 ... H_{n-3} x, the last reflector applied first:
// H_r x = x - (2 (v.x)) v with v = row r of `reflectors` (n x n, entries r + 1.. used), skipped
// where has_reflector[r] is 0; v.x sums over i = r + 1 .. n - 1 in order. Lanes past `count`
// (up to stride) may be changed. stride is a multiple of vector_lanes().
void reflect_columns(const double* reflectors, const char* has_reflector, int64_t n, double* columns, int64_t stride,
                     int64_t count);
// The doubles in one vector of the dispatched target (the padding reflect_columns needs).
int64_t vector_lanes();

namespace scalar {
bool weighted_rows(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                   double* out);
void reflect_columns(const double* reflectors, const char* has_reflector, int64_t n, double* columns, int64_t stride,
                     int64_t count);
void subspace_energy(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k, double* energy);
void subspace_energy_fused(const double* rows, int64_t count, int64_t dim, const double* vectors, int64_t k,
                           double* energy);
void symmetric_times_vector(const double* a, int64_t n, int64_t from, const double* v, double* p);
void rank2_update_rows(double* a, int64_t n, int64_t row_begin, int64_t row_end, int64_t col_begin, const double* v,
                       const double* w, const double* next_v, double* p);
}  // namespace scalar

}  // namespace veloxquant::eviction
