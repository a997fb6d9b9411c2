// The tile kernels against their scalar references (same sums, reassociated).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "veloxquant/attention/tile_kernels.h"

namespace veloxquant::attention::kernels {
namespace {

std::vector<float> random_values(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(TileKernels, ScoreAndAccumulateMatchScalar) {
  for (int64_t d : {1, 7, 8, 64, 100, 128}) {
    for (int64_t nq : {1, 2, 3, 4, 5, 9, 24}) {
      const int64_t rows = 37, ld = 64;
      const auto q = random_values(static_cast<std::size_t>(nq * d), 1);
      const auto k = random_values(static_cast<std::size_t>(rows * (d + 3)), 2);
      std::vector<float> s(static_cast<std::size_t>(nq * ld)), s_ref(s.size());
      score_rows(q.data(), d, nq, k.data(), d + 3, rows, d, s.data(), ld);
      scalar::score_rows(q.data(), d, nq, k.data(), d + 3, rows, d, s_ref.data(), ld);
      for (int64_t r = 0; r < nq; ++r) {
        for (int64_t j = 0; j < rows; ++j) EXPECT_NEAR(s[r * ld + j], s_ref[r * ld + j], 1e-4f * std::sqrt(float(d)));
      }
      const auto w = random_values(static_cast<std::size_t>(nq * ld), 3);
      std::vector<float> acc = random_values(static_cast<std::size_t>(nq * (d + 1)), 4), acc_ref = acc;
      accumulate_rows(w.data(), ld, nq, k.data(), d + 3, rows, d, acc.data(), d + 1);
      scalar::accumulate_rows(w.data(), ld, nq, k.data(), d + 3, rows, d, acc_ref.data(), d + 1);
      for (std::size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], acc_ref[i], 1e-3f);
    }
  }
}

TEST(TileKernels, AffineDecodeMatchesScalar) {
  for (int64_t group : {8, 16, 32, 5}) {
    const int64_t n = 128;
    std::vector<uint8_t> codes(n);
    for (int64_t i = 0; i < n; ++i) codes[static_cast<std::size_t>(i)] = static_cast<uint8_t>((i * 37) % 16);
    const auto scale = random_values(static_cast<std::size_t>(n / group + 1), 5);
    const auto min = random_values(scale.size(), 6);
    std::vector<float> out(n), ref(n);
    affine_decode(codes.data(), scale.data(), min.data(), group, n, out.data());
    scalar::affine_decode(codes.data(), scale.data(), min.data(), group, n, ref.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[static_cast<std::size_t>(i)], ref[static_cast<std::size_t>(i)], 1e-5f);
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels

namespace veloxquant::attention::kernels {
namespace {
TEST(TileKernels, UnpackPlanesMatchesScalar) {
  std::vector<uint8_t> bytes(40);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 97 + 13);
  for (int bits : {1, 2, 4, 8}) {
    for (int64_t plane : {int64_t{3}, int64_t{8}, int64_t{16}, int64_t{40}}) {
      std::vector<float> out(static_cast<std::size_t>(plane * 8 / bits)), ref(out.size());
      unpack_planes(bytes.data(), plane, bits, out.data());
      scalar::unpack_planes(bytes.data(), plane, bits, ref.data());
      EXPECT_EQ(out, ref) << "bits " << bits << " plane " << plane;
      // Plane k, byte p holds the code of natural index p * (8 / bits) + k.
      if (bits < 8) {
        EXPECT_EQ(ref[static_cast<std::size_t>(plane)], static_cast<float>((bytes[0] >> bits) & ((1 << bits) - 1)));
      }
    }
  }
}
}  // namespace
}  // namespace veloxquant::attention::kernels

namespace veloxquant::attention::kernels {
namespace {
TEST(TileKernels, CentroidPlanesMatchScalar) {
  std::vector<uint8_t> s1(64), s2(64);
  for (std::size_t i = 0; i < s1.size(); ++i) {
    s1[i] = static_cast<uint8_t>(i * 131 + 7);
    s2[i] = static_cast<uint8_t>(i * 29 + 101);
  }
  for (int bits : {1, 2, 4, 8}) {
    const auto c1 = random_values(std::size_t{1} << bits, 40 + bits), c2 = random_values(c1.size(), 50 + bits);
    for (int64_t plane : {int64_t{5}, int64_t{8}, int64_t{16}, int64_t{64}}) {
      for (bool two : {false, true}) {
        const int64_t rows = 64 / plane;  // rows `plane` bytes apart
        std::vector<float> out(static_cast<std::size_t>(rows * plane * 8 / bits)), ref(out.size());
        centroid_planes(s1.data(), two ? s2.data() : nullptr, plane, rows, plane, bits, c1.data(), c2.data(), out.data());
        scalar::centroid_planes(s1.data(), two ? s2.data() : nullptr, plane, rows, plane, bits, c1.data(), c2.data(),
                                ref.data());
        EXPECT_EQ(out, ref) << "bits " << bits << " plane " << plane;
      }
    }
  }
}
}  // namespace
}  // namespace veloxquant::attention::kernels

namespace veloxquant::attention::kernels {
namespace {
TEST(TileKernels, ScaleAndMaxMatchesScalar) {
  for (int64_t n : {0, 1, 7, 8, 64, 61}) {
    auto a = random_values(static_cast<std::size_t>(n), 9), b = a;
    EXPECT_EQ(scale_and_max(a.data(), n, 0.125f), scalar::scale_and_max(b.data(), n, 0.125f));
    EXPECT_EQ(a, b);
  }
}
}  // namespace
}  // namespace veloxquant::attention::kernels
