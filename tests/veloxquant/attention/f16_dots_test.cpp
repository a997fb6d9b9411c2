// A few f16-row dot products at once (attention/f16_dots.h): the SIMD kernel equals the scalar
// reference bit for bit on every target this machine runs (AVX3's paired 16-lane loops, AVX2's
// 8-lane ones, ...) — 1-9, 16, 21 and 32 factor rows, 1-7 vectors, lengths with and without a
// partial chunk, strided inputs — and both equal the products computed in double within float
// rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/random_values.h"

#include "base/half.h"
#include "veloxquant/attention/f16_dots.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

// Runs `call(out)` on a copy of `start` for every SIMD target this machine runs and expects `ref`.
template <class Call>
void expect_on_every_target(const std::vector<float>& start, const std::vector<float>& ref, const Call& call,
                            const std::string& what) {
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<float> out = start;
    call(out);
    ASSERT_EQ(out, ref) << target << ", " << what;
  });
}

// GEAR's energy rule keeps up to min(G, D) terms per block; the kernels block rows by 1-8.
const int64_t kRanks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 21, 32};

// One (length, rank, vectors) case: SIMD equal to scalar bit for bit on every target, and near
// the products in double.
void check_dots(int64_t n, int64_t rank, int64_t n_x) {
  const int64_t a_stride = n + 3, x_stride = n + 5;
  const std::vector<float> af = test_support::normal_values(static_cast<std::size_t>(rank * a_stride), 17);
  std::vector<uint16_t> a(af.size());
  for (std::size_t k = 0; k < af.size(); ++k) a[k] = base::f32_to_f16(af[k]);
  const std::vector<float> x = test_support::normal_values(static_cast<std::size_t>(n_x * x_stride), 19);
  std::vector<float> got(static_cast<std::size_t>(n_x * rank), -1.0f), ref(got);
  f16_dots(a.data(), a_stride, rank, x.data(), x_stride, n_x, n, got.data());
  scalar::f16_dots(a.data(), a_stride, rank, x.data(), x_stride, n_x, n, ref.data());
  ASSERT_EQ(got, ref) << "n " << n << ", rank " << rank << ", vectors " << n_x;
  expect_on_every_target(
      std::vector<float>(got.size(), -1.0f), ref,
      [&](std::vector<float>& out) { f16_dots(a.data(), a_stride, rank, x.data(), x_stride, n_x, n, out.data()); },
      "n " + std::to_string(n) + ", rank " + std::to_string(rank) + ", vectors " + std::to_string(n_x));
  for (int64_t r = 0; r < n_x; ++r) {
    for (int64_t i = 0; i < rank; ++i) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t c = 0; c < n; ++c) {
        const double term = double(base::f16_to_f32(a[static_cast<std::size_t>(i * a_stride + c)])) *
                            x[static_cast<std::size_t>(r * x_stride + c)];
        exact += term;
        magnitude += std::fabs(term);
      }
      EXPECT_NEAR(got[static_cast<std::size_t>(r * rank + i)], exact, 1e-5 * (magnitude + 1.0));
    }
  }
}

TEST(F16Dots, SimdEqualsScalarBitForBitAndTheDoubleProducts) {
  for (const int64_t n : {int64_t{64}, int64_t{32}, int64_t{37}, int64_t{5}}) {
    for (const int64_t rank : kRanks) {
      for (const int64_t n_x : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
        check_dots(n, rank, n_x);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// One (length, rank, output rows) case: SIMD equal to scalar bit for bit on every target, near
// the update in double, and the columns past n untouched.
void check_rank_update(int64_t n, int64_t rank, int64_t n_out) {
  const int64_t a_stride = n + 3, out_stride = n + 9;
  const std::vector<float> af = test_support::normal_values(static_cast<std::size_t>(rank * a_stride), 23);
  std::vector<uint16_t> a(af.size());
  for (std::size_t k = 0; k < af.size(); ++k) a[k] = base::f32_to_f16(af[k]);
  const std::vector<float> coef = test_support::normal_values(static_cast<std::size_t>(n_out * rank), 29);
  const std::vector<float> start = test_support::normal_values(static_cast<std::size_t>(n_out * out_stride), 31);
  std::vector<float> got(start), ref(start);
  f16_rank_update(coef.data(), rank, n_out, a.data(), a_stride, n, got.data(), out_stride);
  scalar::f16_rank_update(coef.data(), rank, n_out, a.data(), a_stride, n, ref.data(), out_stride);
  ASSERT_EQ(got, ref) << "n " << n << ", rank " << rank << ", rows " << n_out;
  expect_on_every_target(
      start, ref,
      [&](std::vector<float>& out) {
        f16_rank_update(coef.data(), rank, n_out, a.data(), a_stride, n, out.data(), out_stride);
      },
      "n " + std::to_string(n) + ", rank " + std::to_string(rank) + ", rows " + std::to_string(n_out));
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t t = 0; t < out_stride; ++t) {
      const std::size_t o = static_cast<std::size_t>(r * out_stride + t);
      if (t >= n) {  // past n: untouched
        EXPECT_EQ(got[o], start[o]);
        continue;
      }
      double exact = start[o], magnitude = std::fabs(start[o]);
      for (int64_t i = 0; i < rank; ++i) {
        const double term = double(coef[static_cast<std::size_t>(r * rank + i)]) *
                            base::f16_to_f32(a[static_cast<std::size_t>(i * a_stride + t)]);
        exact += term;
        magnitude += std::fabs(term);
      }
      EXPECT_NEAR(got[o], exact, 1e-5 * (magnitude + 1.0));
    }
  }
}

// The rank update (out += coefficients x f16 rows): the SIMD kernel equals the scalar reference
// bit for bit on every target (ranks 1-9, 16, 21, 32, so the 4- and 8-row blocks and their
// remainders, 1-7 output rows, lengths with and without a partial 8 or 16, strided rows), and
// both equal the update computed in double.
TEST(F16RankUpdate, SimdEqualsScalarBitForBitAndTheDoubleUpdate) {
  for (const int64_t n : {int64_t{64}, int64_t{32}, int64_t{37}, int64_t{5}, int64_t{24}}) {
    for (const int64_t rank : kRanks) {
      for (const int64_t n_out : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
        check_rank_update(n, rank, n_out);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// One head's factors over 7 blocks of 32 rows, ranks 2, 0, 3, 2, 5, 19, 32 (the key and value
// terms share counts and offsets here), left factors [rank, group] and right ones [rank, dim] in
// f16 with padded strides.
struct LowRankFactors {
  static constexpr int64_t kGroup = 32, kDim = 64, kBlocks = 7, kLd = 224;
  static constexpr int64_t kLeftStride = kGroup + 3, kRightStride = kDim + 5;
  std::vector<int32_t> terms = std::vector<int32_t>(kBlocks * 4);
  std::vector<uint16_t> left, right;

  LowRankFactors() {
    const int32_t ranks[kBlocks] = {2, 0, 3, 2, 5, 19, 32};
    int32_t used = 0;
    for (int64_t g = 0; g < kBlocks; ++g) {
      terms[g * 4 + 0] = used;
      terms[g * 4 + 1] = ranks[g];
      terms[g * 4 + 2] = used;
      terms[g * 4 + 3] = ranks[g];
      used += ranks[g];
    }
    left = halves(static_cast<std::size_t>(used * kLeftStride), 41);
    right = halves(static_cast<std::size_t>(used * kRightStride), 43);
  }
  static std::vector<uint16_t> halves(std::size_t n, uint64_t seed) {
    const std::vector<float> f = test_support::normal_values(n, seed);
    std::vector<uint16_t> h(n);
    for (std::size_t k = 0; k < n; ++k) h[k] = base::f32_to_f16(f[k]);
    return h;
  }
  LowRankTerms keys() const {
    return {terms.data(), 4, 0, left.data(), kLeftStride, right.data(), kRightStride, kGroup};
  }
  LowRankTerms values() const {
    return {terms.data(), 4, 2, left.data(), kLeftStride, right.data(), kRightStride, kGroup};
  }
  static double f(const std::vector<uint16_t>& v, int64_t i) {
    return double(base::f16_to_f32(v[static_cast<std::size_t>(i)]));
  }
  // `start` plus row t's low-rank key term against query q (kDim floats), in double.
  double key_term(const float* q, int64_t t, double start) const {
    const int64_t g = t / kGroup;
    double term = start;
    for (int64_t i = terms[g * 4]; i < terms[g * 4] + terms[g * 4 + 1]; ++i) {
      double projection = 0.0;
      for (int64_t c = 0; c < kDim; ++c) projection += f(right, i * kRightStride + c) * q[c];
      term += projection * f(left, i * kLeftStride + (t - g * kGroup));
    }
    return term;
  }
  // `start` plus channel c of the low-rank value terms of rows [j0, j1) under weights w
  // (w[t - j0]), in double.
  double value_term(const float* w, int64_t j0, int64_t j1, int64_t c, double start) const {
    double term = start;
    for (int64_t g = j0 / kGroup; g * kGroup < j1; ++g) {
      const int64_t lo = std::max(j0, g * kGroup), hi = std::min(j1, (g + 1) * kGroup);
      for (int64_t i = terms[g * 4 + 2]; i < terms[g * 4 + 2] + terms[g * 4 + 3]; ++i) {
        double coefficient = 0.0;
        for (int64_t t = lo; t < hi; ++t)
          coefficient += double(w[t - j0]) * f(left, i * kLeftStride + (t - g * kGroup));
        term += coefficient * f(right, i * kRightStride + c);
      }
    }
    return term;
  }
};

// One tile [j0, j1) and n_q query rows: scores and value sums equal to the scalar reference bit
// for bit on every target, and to the terms computed in double from the factors.
void check_tile(const LowRankFactors& fx, int64_t n_q, int64_t j0, int64_t j1) {
  constexpr int64_t kGroup = LowRankFactors::kGroup, kDim = LowRankFactors::kDim, kLd = LowRankFactors::kLd;
  const LowRankTerms keys = fx.keys(), values = fx.values();
  const std::vector<float> q = test_support::normal_values(static_cast<std::size_t>(n_q * (kDim + 4)), 47);
  const std::vector<float> start = test_support::normal_values(static_cast<std::size_t>(n_q * kLd), 53);
  std::vector<float> got(start), ref(start), scratch(static_cast<std::size_t>(n_q * kGroup)), scratch2(scratch);
  low_rank_scores(keys, j0, j1, q.data(), kDim + 4, kDim, n_q, got.data(), kLd, scratch.data());
  scalar::low_rank_scores(keys, j0, j1, q.data(), kDim + 4, kDim, n_q, ref.data(), kLd, scratch2.data());
  ASSERT_EQ(got, ref) << "scores, rows " << n_q << ", tile [" << j0 << ", " << j1 << ")";
  expect_on_every_target(
      start, ref,
      [&](std::vector<float>& out) {
        low_rank_scores(keys, j0, j1, q.data(), kDim + 4, kDim, n_q, out.data(), kLd, scratch.data());
      },
      "scores, rows " + std::to_string(n_q) + ", tile at " + std::to_string(j0));
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t t = j0; t < j1; ++t) {
      const double exact = fx.key_term(q.data() + r * (kDim + 4), t, start[static_cast<std::size_t>(r * kLd + t - j0)]);
      EXPECT_NEAR(got[static_cast<std::size_t>(r * kLd + t - j0)], exact, 1e-3) << "row " << t;
    }
  }
  // Values: weights over the tile's rows (ld kLd), accumulators of kDim.
  const std::vector<float> w = test_support::normal_values(static_cast<std::size_t>(n_q * kLd), 59);
  const std::vector<float> acc0 = test_support::normal_values(static_cast<std::size_t>(n_q * kDim), 61);
  std::vector<float> acc(acc0), acc_ref(acc0);
  low_rank_values(values, j0, j1, w.data(), kLd, n_q, kDim, acc.data(), scratch.data());
  scalar::low_rank_values(values, j0, j1, w.data(), kLd, n_q, kDim, acc_ref.data(), scratch2.data());
  ASSERT_EQ(acc, acc_ref) << "values, rows " << n_q << ", tile [" << j0 << ", " << j1 << ")";
  expect_on_every_target(
      acc0, acc_ref,
      [&](std::vector<float>& out) {
        low_rank_values(values, j0, j1, w.data(), kLd, n_q, kDim, out.data(), scratch.data());
      },
      "values, rows " + std::to_string(n_q) + ", tile at " + std::to_string(j0));
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t c = 0; c < kDim; ++c) {
      const double exact = fx.value_term(w.data() + r * kLd, j0, j1, c, acc0[static_cast<std::size_t>(r * kDim + c)]);
      EXPECT_NEAR(acc[static_cast<std::size_t>(r * kDim + c)], exact, 1e-3) << "channel " << c;
    }
  }
}

// One head's low-rank terms over a tile (GEAR's per-block factors): the dispatched kernel equals
// the scalar reference (f16_dots then f16_rank_update per block) bit for bit on every target, and
// both equal the terms computed in double from the factors — blocks of ranks 0-5 (2 the 8-lane
// fast path) and 19, 32 (the energy rule's), tiles cut inside blocks (ragged ends), 1/3/4/7
// query rows (GQA groups of 1 and 3, prefill blocks).
TEST(F16LowRankTerms, TileEqualsScalarBitForBitAndTheDoubleTerms) {
  const LowRankFactors fx;
  const std::pair<int64_t, int64_t> tiles[] = {{0, 64},  {64, 128}, {128, 160}, {5, 70},
                                               {33, 34}, {90, 155}, {160, 224}, {150, 214}};
  for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
    for (const auto& [j0, j1] : tiles) {
      check_tile(fx, n_q, j0, j1);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
