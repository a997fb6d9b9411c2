#include "veloxquant/core/kmeans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "veloxquant/core/rng.h"

namespace veloxquant::core {
namespace {

// n points around each of the given centres, spread sigma.
std::vector<float> blobs(const std::vector<std::vector<float>>& centres, int per, double sigma, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x;
  for (int p = 0; p < per; ++p) {
    for (const auto& c : centres) {
      for (float v : c) x.push_back(static_cast<float>(v + sigma * rng.normal()));
    }
  }
  return x;
}

double brute_inertia(const std::vector<float>& x, int64_t dim, const KMeansResult& r) {
  double s = 0.0;
  const int64_t n = static_cast<int64_t>(x.size()) / dim;
  for (int64_t i = 0; i < n; ++i) {
    // Every point sits in its nearest cell after convergence.
    EXPECT_EQ(r.assignment[i], nearest_centroid(&x[i * dim], r.centroids.data(), r.k, dim)) << i;
    for (int64_t d = 0; d < dim; ++d) {
      const double diff = x[i * dim + d] - r.centroids[r.assignment[i] * dim + d];
      s += diff * diff;
    }
  }
  return s;
}

TEST(KMeans, RecoversWellSeparatedClusters) {
  const std::vector<std::vector<float>> centres = {{0, 0}, {10, 0}, {0, 10}, {10, 10}};
  const std::vector<float> x = blobs(centres, 50, 0.3, 1);
  const KMeansResult r = kmeans(x.data(), 200, 2, 4, 50, 42);
  std::set<int> found;
  for (const auto& c : centres) {
    const int32_t idx = nearest_centroid(c.data(), r.centroids.data(), 4, 2);
    found.insert(idx);
    const std::size_t at = static_cast<std::size_t>(idx) * 2;
    EXPECT_NEAR(r.centroids[at], c[0], 0.2);
    EXPECT_NEAR(r.centroids[at + 1], c[1], 0.2);
  }
  EXPECT_EQ(found.size(), 4u);
  // Points of one blob share one cell (points are laid out blob-major every 4).
  for (int i = 4; i < 200; ++i) EXPECT_EQ(r.assignment[i], r.assignment[i % 4]);
  EXPECT_NEAR(r.inertia, brute_inertia(x, 2, r), 1e-6 * r.inertia);
}

TEST(KMeans, SameSeedSameCodebookAndMoreCentresNeverWorse) {
  const std::vector<float> x = blobs({{0, 0, 0}, {1, 2, 3}, {-2, 1, 0}}, 40, 1.0, 5);
  const KMeansResult a = kmeans(x.data(), 120, 3, 8, 30, 7);
  const KMeansResult b = kmeans(x.data(), 120, 3, 8, 30, 7);
  EXPECT_EQ(a.centroids, b.centroids);
  EXPECT_EQ(a.assignment, b.assignment);
  double previous = kmeans(x.data(), 120, 3, 1, 30, 7).inertia;
  for (int k : {2, 4, 16, 120}) {
    const KMeansResult r = kmeans(x.data(), 120, 3, k, 30, 7);
    EXPECT_LE(r.inertia, previous * (1 + 1e-9)) << k;
    previous = r.inertia;
  }
  EXPECT_NEAR(previous, 0.0, 1e-9);  // k = n: every point its own centroid
}

TEST(KMeans, OneCentreIsTheWeightedMean) {
  const std::vector<float> x = {0, 0, 2, 4, 4, 8};
  const std::vector<float> w = {1, 1, 2};
  const KMeansResult r = kmeans(x.data(), 3, 2, 1, 10, 3, w.data());
  EXPECT_NEAR(r.centroids[0], (0 + 2 + 8) / 4.0, 1e-6);
  EXPECT_NEAR(r.centroids[1], (0 + 4 + 16) / 4.0, 1e-6);
}

TEST(KMeans, MoreCentresThanDistinctPointsDoesNotFail) {
  const std::vector<float> x = {1, 1, 1, 1, 1, 1};  // three copies of (1, 1)
  const KMeansResult r = kmeans(x.data(), 3, 2, 5, 10, 0);
  EXPECT_EQ(r.centroids.size(), 10u);
  EXPECT_EQ(r.inertia, 0.0);
  for (float v : r.centroids) EXPECT_EQ(v, 1.0f);
}

TEST(KMeans, RefusesEmptyInput) {
  const float one = 1.0f;
  EXPECT_THROW(kmeans(&one, 0, 1, 1, 1, 0), std::invalid_argument);
  EXPECT_THROW(kmeans(&one, 1, 0, 1, 1, 0), std::invalid_argument);
  EXPECT_THROW(kmeans(&one, 1, 1, 0, 1, 0), std::invalid_argument);
}

}  // namespace
}  // namespace veloxquant::core
