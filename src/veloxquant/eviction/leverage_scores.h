#pragma once
// CurDKV's value-aware leverage scores (Sengupta et al., NeurIPS 2025, arXiv 2509.15038, as the
// original adapts them; spec §6 row 37). A token's attention weights w over a set of rows scale
// their values into the block M = diag(w) V, row j being row j's contribution to the attention
// output. A row's leverage is its share of M's energy in the top rank_cap right singular
// directions u_1..u_k of M:
//
//   l_j = sum_t <m_j, u_t>^2 / sum_t s_t^2,   t = 1..k,  k = max(1, min(rank_cap, rows, dim))
//
// which is the original's energy-weighted sum_t s_t^2 U_jt^2 / sum_t s_t^2 (U_jt s_t = <m_j, u_t>);
// the scores sum to 1. When k reaches the block's rank (k >= rows or k >= dim) the projection
// keeps all of m_j and l_j = |m_j|^2 / |M|_F^2. All-zero blocks score 0.
#include <cstdint>
#include <vector>

namespace veloxquant::eviction {

// out[j] = l_j for the `count` rows `rows[j]` (nullptr: 0..count-1) of `values` (row-major,
// `dim` floats a row), weighted by weights[j].
void value_leverage_scores(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                           int64_t rank_cap, float* out);

// out[count - 1] of value_leverage_scores alone: the last row's leverage. The total energy in the
// top k directions is the sum of M^T M's top k eigenvalues (equal to the rows' energies summed, up
// to rounding), so only that row is projected: curdkv's score for a new row.
float value_self_leverage(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                          int64_t rank_cap);

// Eigen-decomposition of the symmetric n x n matrix `a` (row-major): eigenvalues descending,
// eigenvectors[r * n + i] = component i of the r-th eigenvector. Householder reduction to
// tridiagonal form, then implicit QR steps with Wilkinson shifts (Golub & Van Loan §8.3).
void symmetric_eigen_descending(const std::vector<double>& a, int n, std::vector<double>& eigenvalues,
                                std::vector<double>& eigenvectors);
// The k largest eigenvalues (descending) and their unit eigenvectors (k x n, as rows): the k largest
// eigenvalues of the tridiagonal form by Sturm bisection (tridiagonal_bisection.h; QR would find all
// n), the k vectors by inverse iteration with
// reorthogonalisation, carried back through the reflectors (what the leverage scores use: k of
// n vectors for a fraction of the full decomposition's cost).
void top_symmetric_eigenvectors(const std::vector<double>& a, int n, int k, std::vector<double>& eigenvalues,
                                std::vector<double>& eigenvectors);

}  // namespace veloxquant::eviction
