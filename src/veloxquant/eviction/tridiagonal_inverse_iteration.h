#pragma once
// Eigenvectors of a symmetric tridiagonal matrix T for k given eigenvalues, by inverse iteration:
// curdkv's top-16 eigenvectors (leverage_scores.cpp), the eigenvalues from bisection
// (tridiagonal_bisection.h). For each eigenvalue lambda_r in order:
//   1. factor T - lambda_r I by Gaussian elimination with partial pivoting (LAPACK dgttrf's
//      scheme; a zero pivot becomes eps * max_i(|d_i| + 2 |e_i|));
//   2. x = a fixed start (1 + 0.5 sin(1 + 3.7 i)); twice: solve (T - lambda_r I) x' = x, subtract
//      x's projection on each earlier vector in turn (modified Gram-Schmidt), normalise (a vector
//      that vanishes becomes the unit vector e_{r mod n}).
// With an eigenvalue accurate to rounding of |T| one solve already gives a residual near 1e-14 |T|
// on curdkv's 64 x 64 value Grams; two reach the rounding floor.
//
// The SIMD path runs the eigenvalues in lanes where the order allows it without changing a single
// rounding: every factorisation (partial pivoting as blends), every first solve, and the first
// Gram-Schmidt pass (vector r's subtraction of vector j is applied to every later lane as soon as
// vector j is final, so each lane still subtracts 0, 1, ..., r - 1 in order). The second solve and
// pass of vector r need vector r - 1 final: they run one lane at a time, as the scalar loop does.
// Every sum keeps the scalar reference's terms and order (the file is built without FMA
// contraction): the vectors are the scalar reference's bit for bit on every target.
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
