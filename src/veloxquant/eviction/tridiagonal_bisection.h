#pragma once
// The k largest eigenvalues of a symmetric tridiagonal matrix by Sturm counts, the eigenvalues in
// SIMD lanes (one lane per eigenvalue: a count is one pass over the diagonal for every lane at
// once). curdkv's leverage problems need the top 16 of 64 eigenvalues; this replaced implicit QR
// on all 64 (a latency chain of square roots and divisions).
//
// The count at x is the number of sign changes in the leading principal minors
// p_{-1} = 1, p_i = (d_i - x) p_{i-1} - e_{i-1}^2 p_{i-2} of T - x I (Sturm): a multiply chain, no
// division. Each lane keeps a bracket [lo, hi) around its eigenvalue and bisects it until the
// bracket holds that eigenvalue alone; from there the same pass also gives a Newton step on
// det(T - x I) = p_n (the derivative's chain runs beside the minors), taken while it lands inside
// the bracket and at least halves the previous step, else the midpoint (safeguarded Newton). A
// Newton step below 2^-48 |T| has converged; counts at 2^-50 |T| either side certify the result,
// and a bracket that never isolates (a cluster) stops at bisection's width 2^-52 |T|. A value
// Gram's top 16 take ~17 passes against plain bisection's 54 (results differ from plain bisection's
// by a few units of |T|'s rounding). A lane's result depends only on its own rank and the matrix:
// the SIMD path and the scalar reference give the same doubles bit for bit (the file is built
// without FMA contraction). Guards, as LAPACK's dlaebz does for its ratio form:
//   - the matrix is scaled by a power of two to norm in [1/2, 1) (exact), so no minor overflows
//     between rescalings;
//   - a minor smaller than pivmin = 2^-70 times the previous one is replaced by -pivmin times it
//     (dlaebz's q_i = -pivmin: a perturbation of T far below its rounding, which keeps the chain
//     off exact zeros);
//   - every 4 steps the pair of minors (and of their derivatives, by the same factor) is rescaled
//     by 2^-300 or 2^300 once the minors' larger magnitude leaves [2^-300, 2^300] (powers of two:
//     the signs and ratios are unchanged).
#include <cstdint>

namespace veloxquant::eviction {

// out[r] (r < k, k <= n) = the r-th largest eigenvalue of the n x n symmetric tridiagonal matrix
// with diagonal d[0..n) and off-diagonal e[0..n-1) (e[i] couples i and i + 1). out is
// non-increasing up to the eigenvalues' rounding.
void top_tridiagonal_eigenvalues(const double* d, const double* e, int64_t n, int64_t k, double* out);

namespace scalar {
void top_tridiagonal_eigenvalues(const double* d, const double* e, int64_t n, int64_t k, double* out);
}  // namespace scalar

}  // namespace veloxquant::eviction
