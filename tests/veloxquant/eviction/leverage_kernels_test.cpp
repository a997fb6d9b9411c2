// curdkv's leverage loops (leverage_kernels.h): every SIMD target this machine runs gives the
// scalar loops' doubles bit for bit (ragged sizes: k and n not multiples of any vector width),
// and the scalar loops are the definitions (checked here against sums written out independently).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/eviction/leverage_kernels.h"
#include "support/simd_targets.h"

namespace veloxquant::eviction {
namespace {

std::vector<double> normal_values(std::size_t n, std::mt19937& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

TEST(LeverageKernels, SubspaceEnergyEqualsTheScalarLoopOnEveryTarget) {
  std::mt19937 rng(5);
  for (const int64_t dim : {int64_t{3}, int64_t{13}, int64_t{64}}) {
    for (const int64_t k : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}}) {
      if (k > dim) continue;
      const int64_t count = 37;
      const auto rows = normal_values(static_cast<std::size_t>(count * dim), rng, 1e-2);
      const auto vectors = normal_values(static_cast<std::size_t>(k * dim), rng, 0.3);
      std::vector<double> want(static_cast<std::size_t>(count));
      scalar::subspace_energy(rows.data(), count, dim, vectors.data(), k, want.data());
      // The definition for row 0, written out.
      double row0 = 0.0;
      for (int64_t t = 0; t < k; ++t) {
        double dot = 0.0;
        for (int64_t i = 0; i < dim; ++i)
          dot += rows[static_cast<std::size_t>(i)] * vectors[static_cast<std::size_t>(t * dim + i)];
        row0 += dot * dot;
      }
      ASSERT_EQ(want[0], row0);
      // ... and its fused twin, for row 0 likewise.
      std::vector<double> want_fused(static_cast<std::size_t>(count));
      scalar::subspace_energy_fused(rows.data(), count, dim, vectors.data(), k, want_fused.data());
      double row0_fused = 0.0;
      for (int64_t t = 0; t < k; ++t) {
        double dot = 0.0;
        for (int64_t i = 0; i < dim; ++i)
          dot = std::fma(rows[static_cast<std::size_t>(i)], vectors[static_cast<std::size_t>(t * dim + i)], dot);
        row0_fused += dot * dot;
      }
      ASSERT_EQ(want_fused[0], row0_fused);
      test_support::for_each_simd_target([&](const char* name) {
        std::vector<double> got(static_cast<std::size_t>(count), -1.0);
        subspace_energy(rows.data(), count, dim, vectors.data(), k, got.data());
        const std::vector<double>& reference = subspace_energy_fuses() ? want_fused : want;
        for (int64_t j = 0; j < count; ++j)
          ASSERT_EQ(got[static_cast<std::size_t>(j)], reference[static_cast<std::size_t>(j)])
              << name << " dim " << dim << " k " << k << " row " << j << " fused " << subspace_energy_fuses();
      });
    }
  }
}

TEST(LeverageKernels, HouseholderStepsEqualTheScalarLoopsOnEveryTarget) {
  std::mt19937 rng(9);
  for (const int64_t n : {int64_t{3}, int64_t{13}, int64_t{64}, int64_t{67}}) {
    for (const int64_t from : {int64_t{0}, int64_t{1}, n / 2, n - 2}) {
      // An exactly symmetric matrix, as the reduction keeps it.
      auto a = normal_values(static_cast<std::size_t>(n * n), rng, 1.0);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < i; ++j) a[static_cast<std::size_t>(i * n + j)] = a[static_cast<std::size_t>(j * n + i)];
      }
      const auto v = normal_values(static_cast<std::size_t>(n), rng, 1.0);
      const auto w = normal_values(static_cast<std::size_t>(n), rng, 1.0);
      const auto next_v = normal_values(static_cast<std::size_t>(n), rng, 1.0);
      std::vector<double> want_p(static_cast<std::size_t>(n), 0.0);
      scalar::symmetric_times_vector(a.data(), n, from, v.data(), want_p.data());
      const int64_t last = n - 1;  // the definition, for the last row
      double p_last = 0.0;
      for (int64_t j = from; j < n; ++j)
        p_last += a[static_cast<std::size_t>(last * n + j)] * v[static_cast<std::size_t>(j)];
      ASSERT_EQ(want_p[static_cast<std::size_t>(last)], p_last);
      test_support::for_each_simd_target([&](const char* name) {
        std::vector<double> p(static_cast<std::size_t>(n), -1.0);
        symmetric_times_vector(a.data(), n, from, v.data(), p.data());
        for (int64_t i = from; i < n; ++i)
          ASSERT_EQ(p[static_cast<std::size_t>(i)], want_p[static_cast<std::size_t>(i)])
              << name << " n " << n << " i " << i;
      });
      // The update of B's first row alone, then of the rest with the next step's B v (columns from
      // + 1 on), then one pass over rows and columns alike without it.
      struct Part {
        int64_t row_begin, row_end, col_begin;
        bool sums;
      };
      for (const Part& part :
           {Part{from, from + 1, from, false}, Part{from + 1, n, from + 1, true}, Part{from, n, from, false}}) {
        if (part.col_begin >= n) continue;
        std::vector<double> want_a = a, want_sums(static_cast<std::size_t>(n), -2.0);
        scalar::rank2_update_rows(want_a.data(), n, part.row_begin, part.row_end, part.col_begin, v.data(), w.data(),
                                  part.sums ? next_v.data() : nullptr, want_sums.data());
        const int64_t r = part.row_end - 1, c = part.col_begin;  // the definitions, at one entry
        ASSERT_EQ(
            want_a[static_cast<std::size_t>(r * n + c)],
            a[static_cast<std::size_t>(r * n + c)] - (v[static_cast<std::size_t>(r)] * w[static_cast<std::size_t>(c)] +
                                                      w[static_cast<std::size_t>(r)] * v[static_cast<std::size_t>(c)]));
        if (part.sums) {
          double sum = 0.0;
          for (int64_t i = part.row_begin; i < part.row_end; ++i)
            sum += want_a[static_cast<std::size_t>(i * n + c)] * next_v[static_cast<std::size_t>(i)];
          ASSERT_EQ(want_sums[static_cast<std::size_t>(c)], sum);
        }
        test_support::for_each_simd_target([&](const char* name) {
          std::vector<double> got_a = a, got_sums(static_cast<std::size_t>(n), -2.0);
          rank2_update_rows(got_a.data(), n, part.row_begin, part.row_end, part.col_begin, v.data(), w.data(),
                            part.sums ? next_v.data() : nullptr, got_sums.data());
          ASSERT_EQ(got_a, want_a) << name << " n " << n << " rows from " << part.row_begin << " columns from "
                                   << part.col_begin;
          ASSERT_EQ(got_sums, want_sums) << name << " n " << n << " columns from " << part.col_begin;
        });
      }
    }
  }
}

TEST(LeverageKernels, ReflectColumnsEqualsTheScalarLoopOnEveryTarget) {
  std::mt19937 rng(13);
  for (const int64_t n : {int64_t{3}, int64_t{13}, int64_t{64}}) {
    for (const int64_t count : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}}) {
      if (count > n) continue;
      // Unit reflectors on indices r + 1.., one of them missing.
      std::vector<double> reflectors(static_cast<std::size_t>(n * n), 0.0);
      std::vector<char> has(static_cast<std::size_t>(n), 0);
      for (int64_t r = 0; r + 2 < n; ++r) {
        if (r == n / 3) continue;
        has[static_cast<std::size_t>(r)] = 1;
        double norm = 0.0;
        for (int64_t i = r + 1; i < n; ++i) {
          double& x = reflectors[static_cast<std::size_t>(r * n + i)];
          x = std::normal_distribution<double>(0.0, 1.0)(rng);
          norm += x * x;
        }
        for (int64_t i = r + 1; i < n; ++i) reflectors[static_cast<std::size_t>(r * n + i)] /= std::sqrt(norm);
      }
      const int64_t stride = 32;  // a multiple of every target's lanes
      const auto start = normal_values(static_cast<std::size_t>(n * stride), rng, 1.0);
      std::vector<double> want = start;
      scalar::reflect_columns(reflectors.data(), has.data(), n, want.data(), stride, count);
      // The definition for column 0: the reflectors applied one by one, the last first.
      std::vector<double> x(static_cast<std::size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = start[static_cast<std::size_t>(i * stride)];
      for (int64_t r = n - 3; r >= 0; --r) {
        if (!has[static_cast<std::size_t>(r)]) continue;
        double dot = 0.0;
        for (int64_t i = r + 1; i < n; ++i)
          dot += reflectors[static_cast<std::size_t>(r * n + i)] * x[static_cast<std::size_t>(i)];
        for (int64_t i = r + 1; i < n; ++i)
          x[static_cast<std::size_t>(i)] -= 2.0 * dot * reflectors[static_cast<std::size_t>(r * n + i)];
      }
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(want[static_cast<std::size_t>(i * stride)], x[static_cast<std::size_t>(i)]);
      test_support::for_each_simd_target([&](const char* name) {
        std::vector<double> got = start;
        reflect_columns(reflectors.data(), has.data(), n, got.data(), stride, count);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t c = 0; c < count; ++c)
            ASSERT_EQ(got[static_cast<std::size_t>(i * stride + c)], want[static_cast<std::size_t>(i * stride + c)])
                << name << " n " << n << " count " << count << " (" << i << ", " << c << ")";
        }
      });
    }
  }
}

TEST(LeverageKernels, WeightedRowsEqualTheScalarLoopOnEveryTarget) {
  std::mt19937 rng(17);
  for (const int64_t dim : {int64_t{3}, int64_t{13}, int64_t{64}}) {
    const int64_t stored = 9, count = 5;
    std::vector<float> values(static_cast<std::size_t>(stored * dim)), weights(static_cast<std::size_t>(count));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : values) v = normal(rng);
    for (float& w : weights) w = std::fabs(normal(rng));
    const std::vector<int32_t> rows = {7, 0, 3, 8, 2};
    std::vector<double> want(static_cast<std::size_t>(count * dim));
    ASSERT_TRUE(scalar::weighted_rows(values.data(), rows.data(), count, dim, weights.data(), want.data()));
    ASSERT_EQ(want[static_cast<std::size_t>(dim + 1)],
              double(weights[1]) * values[1]);  // candidate 1 (stored row 0), entry 1
    const std::vector<float> zero(static_cast<std::size_t>(count), 0.0f);
    test_support::for_each_simd_target([&](const char* name) {
      std::vector<double> got(want.size(), -1.0);
      ASSERT_TRUE(weighted_rows(values.data(), rows.data(), count, dim, weights.data(), got.data())) << name;
      ASSERT_EQ(got, want) << name << " dim " << dim;
      // All-zero weights: nothing nonzero (and no rows list: the first `count` rows).
      ASSERT_FALSE(weighted_rows(values.data(), nullptr, count, dim, zero.data(), got.data())) << name;
    });
  }
}

}  // namespace
}  // namespace veloxquant::eviction
