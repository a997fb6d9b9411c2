#pragma once
// Eigenvectors of a symmetric tridiagonal matrix T for k given eigenvalues, by inverse iteration:
// curdkv's top-16 eigenvectors (leverage_scores.cpp), the eigenvalues from bisection
// (tridiagonal_bisection.h). As a block:
//   1. factor T - lambda_r I for every r by Gaussian elimination with partial pivoting (LAPACK
//      dgttrf's scheme; a zero pivot becomes eps * max_i(|d_i| + 2 |e_i|));
//   2. x_r = a fixed start (1 + 0.5 sin(1 + 3.7 i)); twice: solve (T - lambda_r I) x_r' = x_r for
//      every r, then orthonormalise x_0..x_{k-1} in order by modified Gram-Schmidt (a vector that
//      vanishes becomes the unit vector e_{r mod n}).
// With eigenvalues accurate to rounding of |T| one solve already gives a residual near 1e-14 |T|
// on curdkv's 64 x 64 value Grams; two reach the rounding floor.
//
// This replaced the one-eigenvalue-at-a-time loop (solve, orthogonalise against the finished
// vectors, solve again, orthogonalise again), whose second solve of vector r had to wait for
// vector r - 1: here the solves of all k run in SIMD lanes (one eigenvalue a lane, the pivoting as
// blends) and each Gram-Schmidt step takes its projection off every later lane at once. The
// vectors differ from the old loop's at rounding (~eps |T| / gap); the eigenpairs stay at the
// rounding floor (tridiagonal_bisection_test) and curdkv's kept rows are unchanged (its generate
// md5s, docs/methods/curdkv.md). Every sum keeps the scalar reference's terms and order (the file
// is built without FMA contraction): the SIMD path is the scalar reference's bit for bit on every
// target.
#include <cstdint>

namespace veloxquant::eviction {

// vectors[r * n + i] (r < k <= n): component i of the unit eigenvector of T for lambdas[r], T the
// n x n symmetric tridiagonal matrix with diagonal d[0..n) and off-diagonal e[0..n-1) (e[i] couples
// i and i + 1). Each vector is orthogonal to the earlier ones up to rounding.
void tridiagonal_inverse_iteration(const double* d, const double* e, int64_t n, const double* lambdas, int64_t k,
                                   double* vectors);

namespace scalar {
void tridiagonal_inverse_iteration(const double* d, const double* e, int64_t n, const double* lambdas, int64_t k,
                                   double* vectors);
}  // namespace scalar

}  // namespace veloxquant::eviction
