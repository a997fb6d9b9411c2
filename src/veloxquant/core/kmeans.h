#pragma once
// k-means codebook training for the vector-quantization methods (VecInfer's product codebooks,
// CommVQ, A2ATS): seeded k-means++ initialisation, then Lloyd iterations until no assignment
// changes or the iteration cap is reached. Deterministic for a given seed on every platform
// (core::Rng, fixed loop order, double accumulation; ties go to the lower centroid index).
//
// Degenerate inputs are handled, not asserted: fewer distinct points than k leaves the extra
// centroids as copies of existing points (their cells stay empty), and a cell that empties
// during the iterations is re-seeded with the point farthest from its current centroid.
#include <cstdint>
#include <vector>

namespace veloxquant::core {

struct KMeansResult {
  int64_t k = 0, dim = 0;
  std::vector<float> centroids;     // [k][dim]
  std::vector<int32_t> assignment;  // [n]: index of each point's centroid
  double inertia = 0.0;             // sum of squared distances of points to their centroid
  int iterations = 0;               // Lloyd iterations run
};

// x: n points of dim floats, row-major. Requires n >= 1, dim >= 1, k >= 1 (std::invalid_argument
// otherwise). weights (optional, n entries >= 0) weight each point in the centroid means and the
// inertia; nullptr = all 1.
KMeansResult kmeans(const float* x, int64_t n, int64_t dim, int64_t k, int max_iters, uint64_t seed,
                    const float* weights = nullptr);

// Index of the centroid nearest to v in squared Euclidean distance (lowest index on ties).
int32_t nearest_centroid(const float* v, const float* centroids, int64_t k, int64_t dim);

}  // namespace veloxquant::core
