#pragma once
// Lloyd-Max scalar codebooks (Lloyd 1957/1982, Max 1960): the 2^b levels that minimise the
// mean squared error of quantizing one coordinate drawn from a known density.
//
// Solver, as the original (math/lloyd_max.py, core/constants.py):
//   10,000 uniform points on the support, trapezoid weights; start from linspace(lo, hi, 2^b);
//   boundaries = midpoints of adjacent centroids (outer edges +-inf); centroid = conditional
//   mean of its cell; a cell with mass below 1e-12 keeps its old centroid; stop after 500
//   iterations or when the largest centroid move is below 1e-9.
// Quantize rule: index = number of boundaries strictly below the value (ties go down).
//
// Densities:
//   kGaussian     N(0, 1/d), support +-6 sigma (d = 1 gives the standard normal table).
//   kBeta         the exact density of one coordinate of a uniform unit vector in R^d,
//                 f(x) ~ (1 - x^2)^((d-3)/2) on (-1+1e-6, 1-1e-6); used below d = 64 where
//                 the Gaussian limit is loose (anchors §1.1). Deviation: the linspace start
//                 spans +-min(1, 6/sqrt(d)), not the whole support: cells started where the
//                 density is below 1e-12 never receive mass and would stay empty (at d = 128
//                 six of eight 3-bit levels stuck at +-0.43..1).
//   kLaplacian    zero-mean Laplacian for the RVQ stage-2 residual, scale
//                 max(sqrt(1/d) * (sqrt(3 pi)/2) * 4^-b / sqrt(2), 1e-6), support +-8 scale
//                 (the original's formula, its constant included).
//   kLaplacianMatched  zero-mean Laplacian whose variance equals the distortion D1 of the
//                 stage-1 codebook at (d, b) — the actual variance of the stage-1 residual:
//                 scale = sqrt(D1 / 2), support +-8 scale. The original's formula uses the
//                 Panter-Dite *MSE* (sqrt(3 pi)/2 * 4^-b, a variance) as a standard deviation,
//                 so its codebook is 2^b/1.24 times too narrow (d = 128, b = 4: support
//                 +-0.0042 against a residual sd of 0.0086) and stage 2 mostly clips.
//   kUniformAngle uniform on [0, 2 pi): PolarQuant's level-1 angle (param unused).
//   kPolarAngle   f(psi) ~ (sin psi cos psi)^(n-1) on [0, pi/2], n = param: the angle between
//                 the norms of two halves of n Gaussian coordinates each (PolarQuant, levels >= 2).
// Codebooks are computed once per (distribution, param, bits) and cached, thread-safely.
#include <cstdint>
#include <vector>

namespace veloxquant::core {

enum class Distribution { kGaussian, kBeta, kLaplacian, kLaplacianMatched, kUniformAngle, kPolarAngle };

const char* distribution_name(Distribution d);

struct Codebook {
  Distribution distribution;
  int param;  // d for Gaussian/Beta/Laplacian, n for kPolarAngle
  int bits;
  std::vector<float> centroids;   // 2^bits, ascending
  std::vector<float> boundaries;  // 2^bits - 1 midpoints, ascending
  double distortion;              // E[(x - Q(x))^2] under the density (per coordinate)
  int iterations;                 // Lloyd iterations run
  bool converged;                 // largest move fell below the tolerance
  double support_lo, support_hi;

  // Index of the level for one value (the quantize rule above).
  uint8_t quantize(float x) const;
  // Indices for n values (SIMD count of boundaries below each value).
  void quantize(const float* x, std::size_t n, uint8_t* idx) const;
};

// The cached codebook; bits in 1..8, param >= 1 (>= 2 for kBeta). Throws
// QuantizerConfigError naming the bad value.
const Codebook& lloyd_max_codebook(Distribution distribution, int param, int bits);

// The solver's knobs; the defaults are the original's and are what the cache uses. Measured
// with them (Gaussian, continuous cell integrals): b <= 4 reaches Max's levels to 1e-4, but
// from the linspace start 500 iterations do not converge b >= 5 (b = 6: D 27% above the
// converged optimum, b = 8: 3.8x). Raising max_iterations to 100,000 converges every b.
struct LloydMaxOptions {
  int max_iterations = 500;
  double tolerance = 1e-9;
  int quadrature_points = 10000;
  double laplacian_support = 8.0;  // half-width of the Laplacian support, in scales
};

// Solves without the cache (tests; tools). Same validation.
Codebook solve_lloyd_max(Distribution distribution, int param, int bits, const LloydMaxOptions& options = {});

// The Laplacian scale the original uses for the RVQ stage-2 codebook at (d, b).
double rvq_laplacian_scale(int dim, int bits);
// The scale of kLaplacianMatched: sqrt(D1 / 2), D1 the stage-1 distortion at (d, b).
double rvq_matched_laplacian_scale(int dim, int bits);

// Stage-1 codebook choice of the original (codebooks/strategies.py): Gaussian from d = 64,
// the exact Beta-type density below.
Distribution coordinate_distribution(int dim);

}  // namespace veloxquant::core
