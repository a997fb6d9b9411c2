// top_mass_rows against the selection it replaces: the first k rows of a stable sort by mass
// (descending), ties to the lower index, then in ascending index order — on every SIMD target
// this machine runs (the keys, compaction and index passes are Highway kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "veloxquant/caches/top_mass_rows.h"
#include "support/simd_targets.h"

namespace veloxquant {
namespace {

std::vector<int32_t> reference(const std::vector<double>& mass, int64_t k) {
  std::vector<int32_t> order(mass.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return mass[a] > mass[b]; });
  std::vector<int32_t> chosen(order.begin(), order.begin() + k);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

TEST(TopMassRows, IsTheStableSortsFirstRows) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<uint64_t> keys, candidates;
  for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{100}, int64_t{3968}}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<double> mass(static_cast<std::size_t>(n));
      for (double& m : mass) {
        const double x = u(rng);
        switch (kind) {
          case 0:
            m = x;
            break;  // distinct
          case 1:
            m = std::floor(x * 6.0) / 8.0;
            break;  // few values, many ties
          case 2:
            m = std::exp(-60.0 * x) * 1e-3;
            break;  // many binades
          case 3:
            m = x < 0.7 ? 0.0 : 1.0 + std::ldexp(x, -40);
            break;  // zeros, and last-bit gaps
          default:
            m = 0.25;
            break;  // all equal
        }
      }
      for (const int64_t k : {int64_t{1}, n / 5 + 1, n / 2, n - 1, n}) {
        if (k < 1 || k > n) continue;
        const std::vector<int32_t> want = reference(mass, k);
        test_support::for_each_simd_target([&](const char* target) {
          std::vector<int32_t> got(static_cast<std::size_t>(k) + 1, -7);  // one guard slot
          top_mass_rows(mass.data(), n, k, keys, candidates, got.data());
          EXPECT_EQ(got.back(), -7) << "wrote past k";
          got.pop_back();
          EXPECT_EQ(got, want) << target << " n " << n << " kind " << kind << " k " << k;
        });
      }
    }
  }
}

TEST(TopMassRows, ZeroRowsWritesNothing) {
  std::vector<uint64_t> keys, candidates;
  const double mass[2] = {1.0, 2.0};
  int32_t out = -1;
  top_mass_rows(mass, 2, 0, keys, candidates, &out);
  EXPECT_EQ(out, -1);
}

}  // namespace
}  // namespace veloxquant
