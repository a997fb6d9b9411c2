#include "veloxquant/core/kmeans.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "veloxquant/core/column_distances.h"
#include "veloxquant/core/rng.h"

namespace veloxquant::core {
namespace {

double squared_distance(const float* a, const float* b, int64_t dim) {
  double s = 0.0;
  for (int64_t d = 0; d < dim; ++d) {
    const double diff = static_cast<double>(a[d]) - b[d];
    s += diff * diff;
  }
  return s;
}

// k-means++ (Arthur & Vassilvitskii, 2007): the first centre uniformly, each next one with
// probability proportional to its squared distance to the nearest centre chosen so far.
// The points are read as columns (xt [dim][n]): each new centre's distances to every point are
// one SIMD pass (core/column_distances.h, the same doubles as squared_distance).
std::vector<float> kmeans_plus_plus(const float* x, const float* xt, int64_t n, int64_t dim, int64_t k, Rng& rng,
                                    const float* weights) {
  std::vector<float> centroids(k * dim);
  std::vector<double> nearest(n, std::numeric_limits<double>::infinity()), to_centre(n);
  int64_t pick = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)));
  for (int64_t c = 0; c < k; ++c) {
    std::copy(x + pick * dim, x + (pick + 1) * dim, centroids.begin() + c * dim);
    column_distances(&centroids[c * dim], xt, n, dim, n, to_centre.data());
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      nearest[i] = std::min(nearest[i], to_centre[i]);
      total += nearest[i] * (weights ? weights[i] : 1.0f);
    }
    if (c + 1 == k) break;
    if (total <= 0.0) {
      // Every point coincides with a centre already: the rest repeat the last one.
      continue;
    }
    const double target = rng.uniform() * total;
    double acc = 0.0;
    pick = n - 1;
    for (int64_t i = 0; i < n; ++i) {
      acc += nearest[i] * (weights ? weights[i] : 1.0f);
      if (acc > target) {
        pick = i;
        break;
      }
    }
  }
  return centroids;
}

}  // namespace

int32_t nearest_centroid(const float* v, const float* centroids, int64_t k, int64_t dim) {
  int32_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < k; ++c) {
    const double d = squared_distance(v, centroids + c * dim, dim);
    if (d < best_d) {
      best_d = d;
      best = static_cast<int32_t>(c);
    }
  }
  return best;
}

KMeansResult kmeans(const float* x, int64_t n, int64_t dim, int64_t k, int max_iters, uint64_t seed,
                    const float* weights) {
  if (n < 1 || dim < 1 || k < 1) {
    throw std::invalid_argument("kmeans: needs n >= 1 points, dim >= 1 and k >= 1, got n=" + std::to_string(n) +
                                ", dim=" + std::to_string(dim) + ", k=" + std::to_string(k));
  }
  if (max_iters < 0) throw std::invalid_argument("kmeans: max_iters must be >= 0");
  Rng rng(seed);
  KMeansResult r;
  r.k = k;
  r.dim = dim;
  std::vector<float> columns(static_cast<std::size_t>(std::max(n, k) * dim));  // points, then centroids, as columns
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < dim; ++d) columns[d * n + i] = x[i * dim + d];
  }
  r.centroids = kmeans_plus_plus(x, columns.data(), n, dim, k, rng, weights);
  r.assignment.assign(n, -1);
  std::vector<double> sums(k * dim);
  std::vector<double> mass(k);
  for (int it = 0; it <= max_iters; ++it) {
    bool changed = false;
    // The centroids as columns, so each point's search is one SIMD pass over them (the same
    // distances and the same lowest-index tie rule as nearest_centroid).
    for (int64_t c = 0; c < k; ++c) {
      for (int64_t d = 0; d < dim; ++d) columns[d * k + c] = r.centroids[c * dim + d];
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t c = nearest_column(x + i * dim, columns.data(), k, dim, k);
      if (c != r.assignment[i]) {
        r.assignment[i] = c;
        changed = true;
      }
    }
    if (!changed || it == max_iters) break;
    r.iterations = it + 1;
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(mass.begin(), mass.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double w = weights ? weights[i] : 1.0;
      const int32_t c = r.assignment[i];
      mass[c] += w;
      for (int64_t d = 0; d < dim; ++d) sums[c * dim + d] += w * x[i * dim + d];
    }
    for (int64_t c = 0; c < k; ++c) {
      if (mass[c] > 0.0) {
        for (int64_t d = 0; d < dim; ++d) {
          r.centroids[c * dim + d] = static_cast<float>(sums[c * dim + d] / mass[c]);
        }
        continue;
      }
      // Empty cell: move it onto the point farthest from its own centroid, which splits the
      // worst-served cell instead of leaving a dead codeword.
      int64_t far = 0;
      double far_d = -1.0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = squared_distance(x + i * dim, &r.centroids[r.assignment[i] * dim], dim);
        if (d > far_d) {
          far_d = d;
          far = i;
        }
      }
      if (far_d <= 0.0) continue;  // every point sits on a centroid: nothing to split
      std::copy(x + far * dim, x + (far + 1) * dim, r.centroids.begin() + c * dim);
      r.assignment[far] = static_cast<int32_t>(c);
    }
  }
  r.inertia = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double w = weights ? weights[i] : 1.0;
    r.inertia += w * squared_distance(x + i * dim, &r.centroids[r.assignment[i] * dim], dim);
  }
  return r;
}

}  // namespace veloxquant::core
