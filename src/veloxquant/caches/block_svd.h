#pragma once
// Singular value decomposition of one small block (a cache's G x D block of one head), for the
// low-rank half of GEAR (caches/gear_cache.h): the residual a quantizer leaves is approximated by
// its leading singular triplets, and the optimal rank-r approximation (Eckart-Young) is exactly
// sum_{i<r} sigma_i u_i v_i^T.
//
// Method: the Gram matrix of the shorter side (X X^T when rows <= cols, else X^T X) is
// diagonalised by cyclic Jacobi rotations in double, which is deterministic (fixed sweep order,
// no random start) and accurate for the leading triplets the caches keep; the other side's
// vectors follow as X^T u / sigma (or X v / sigma). Blocks are at most a few hundred on the
// short side (gear_group_size is bounded by validation), so the O(n^3) sweeps stay small.
#include <cstdint>
#include <vector>

namespace veloxquant {

struct BlockSvd {
  int64_t rows = 0, cols = 0;
  std::vector<double> sigma;  // min(rows, cols) singular values, descending (ties: lower index first)
  std::vector<double> left;   // [min(rows, cols)][rows]: unit left vectors (zero where sigma is 0)
  std::vector<double> right;  // [min(rows, cols)][cols]: unit right vectors (zero where sigma is 0)
};

// How the Gram matrix is diagonalised: cyclic Jacobi (above), or Eigen's tridiagonal QR
// (core/linalg.h, symmetric_eigen) — the same decomposition to double rounding, an order of
// magnitude fewer operations (GEAR factors a block per head, keys and values, every G tokens,
// which made Jacobi most of its prefill). The two may differ in the sign of a triplet (u and v
// flip together, sigma u v^T is the same) and in the last bits.
enum class GramSolver { kJacobi, kTridiagonal };

// x: rows x cols, row-major f32. A non-finite block falls back to Jacobi (which never throws).
// vectors >= 0: only the first `vectors` triplets get their vectors (the rest stay zero; every
// sigma is still computed) — a caller with a fixed rank skips the long-side products it drops.
BlockSvd block_svd(const float* x, int64_t rows, int64_t cols, GramSolver solver = GramSolver::kJacobi,
                   int64_t vectors = -1);

// The smallest r with sum_{i<r} sigma_i^2 >= threshold * sum_i sigma_i^2 (0 for an all-zero
// block; threshold in [0, 1]).
int64_t energy_rank(const std::vector<double>& sigma, double threshold);

}  // namespace veloxquant
