// The code-reading tile kernels against their scalar references (the f32 multi-query loops
// are tested with the host: tests/lm/attention_tiles_test.cpp).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support/random_values.h"
#include "support/simd_targets.h"

#include "base/half.h"
#include "veloxquant/attention/tile_kernels.h"

namespace veloxquant::attention::kernels {
namespace {

std::vector<float> random_values(std::size_t n, uint32_t seed) { return test_support::normal_values(n, seed); }

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
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(out[static_cast<std::size_t>(i)], ref[static_cast<std::size_t>(i)], 1e-5f);
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels

namespace veloxquant::attention::kernels {
namespace {
TEST(TileKernels, UnpackPlanesMatchesScalar) {
  std::vector<uint8_t> bytes(std::size_t{3} * 45);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 97 + 13);
  for (int bits : {1, 2, 4, 8}) {
    for (int64_t plane : {int64_t{3}, int64_t{8}, int64_t{16}, int64_t{40}}) {
      // Three rows `plane + 5` bytes apart: the tile form the sources call.
      const int64_t rows = 3, stride = plane + 5;
      ASSERT_LE(static_cast<std::size_t>(rows * stride), bytes.size());
      std::vector<float> out(static_cast<std::size_t>(rows * plane * 8 / bits)), ref(out.size());
      unpack_planes(bytes.data(), stride, rows, plane, bits, out.data());
      scalar::unpack_planes(bytes.data(), stride, rows, plane, bits, ref.data());
      EXPECT_EQ(out, ref) << "bits " << bits << " plane " << plane;
      // Plane k, byte p holds the code of natural index p * (8 / bits) + k.
      if (bits < 8) {
        EXPECT_EQ(ref[static_cast<std::size_t>(plane)], static_cast<float>((bytes[0] >> bits) & ((1 << bits) - 1)));
        // Row 1 starts `stride` bytes in.
        EXPECT_EQ(ref[static_cast<std::size_t>(plane * 8 / bits)],
                  static_cast<float>(bytes[static_cast<std::size_t>(stride)] & ((1 << bits) - 1)));
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
        centroid_planes(s1.data(), two ? s2.data() : nullptr, plane, rows, plane, bits, c1.data(), c2.data(),
                        out.data());
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
TEST(TileKernels, FoldScalesMatchesScalar) {
  for (int64_t d : {1, 7, 8, 64, 100}) {
    for (int64_t nq : {1, 3, 4}) {
      const auto q = random_values(static_cast<std::size_t>(nq * d), 11);
      const auto scale = random_values(static_cast<std::size_t>(d), 12), min = random_values(scale.size(), 13);
      std::vector<float> folded(q.size()), folded_ref(q.size()), bias(static_cast<std::size_t>(nq)),
          bias_ref(bias.size());
      fold_scales(q.data(), nq, d, scale.data(), min.data(), folded.data(), bias.data());
      scalar::fold_scales(q.data(), nq, d, scale.data(), min.data(), folded_ref.data(), bias_ref.data());
      EXPECT_EQ(folded, folded_ref);
      for (std::size_t r = 0; r < bias.size(); ++r) EXPECT_NEAR(bias[r], bias_ref[r], 1e-4f * std::sqrt(float(d)));
    }
  }
}

TEST(TileKernels, ScaleColumnMatchesScalar) {
  for (int64_t n : {1, 7, 8, 37, 64}) {
    const auto w = random_values(static_cast<std::size_t>(n), 14);
    const auto scale = random_values(static_cast<std::size_t>(n), 15);
    const auto min = random_values(static_cast<std::size_t>(n), 16);
    std::vector<float> out(w.size()), ref(w.size());
    const float b = scale_column(w.data(), n, scale.data(), min.data(), out.data());
    const float b_ref = scalar::scale_column(w.data(), n, scale.data(), min.data(), ref.data());
    EXPECT_EQ(out, ref) << "n " << n;
    EXPECT_NEAR(b, b_ref, 1e-4f * std::sqrt(float(n)));
    EXPECT_EQ(ref[0], w[0] * scale[0]);
  }
}

TEST(TileKernels, F16ColumnsTransposesRowsOfFieldsExactly) {
  for (int64_t n : {1, 7, 8, 37, 64}) {
    for (int64_t stride : {2, 4, 6}) {
      const auto values = random_values(static_cast<std::size_t>(n * stride), 18);
      std::vector<uint16_t> rows(values.size());
      for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = base::f32_to_f16(values[i]);
      std::vector<float> out(rows.size()), ref(rows.size());
      f16_columns(rows.data(), n, stride, out.data());
      scalar::f16_columns(rows.data(), n, stride, ref.data());
      EXPECT_EQ(out, ref) << "n " << n << " stride " << stride;
      // Field c of row j lands at c * n + j.
      EXPECT_EQ(ref[static_cast<std::size_t>(n + n - 1)],
                base::f16_to_f32(rows[static_cast<std::size_t>((n - 1) * stride + 1)]));
    }
  }
}

TEST(TileKernels, AddPlanesInterleavedMatchesScalar) {
  for (int per_byte : {1, 2, 4}) {
    for (int64_t plane : {3, 8, 16, 32}) {
      const auto planes = random_values(static_cast<std::size_t>(plane * per_byte), 16);
      std::vector<float> out = random_values(planes.size(), 17), ref = out;
      add_planes_interleaved(planes.data(), plane, per_byte, out.data());
      scalar::add_planes_interleaved(planes.data(), plane, per_byte, ref.data());
      EXPECT_EQ(out, ref) << "per_byte " << per_byte << " plane " << plane;
    }
  }
}
}  // namespace
}  // namespace veloxquant::attention::kernels

namespace veloxquant::attention::kernels {
namespace {
// nq queries' weights (with a bias when nq is odd) over 37 rows 16 bytes past the plane apart:
// the kernel within rounding of its scalar reference.
void check_accumulate_planes(const std::vector<uint8_t>& bytes, int bits, int64_t d, int64_t group, int64_t nq) {
  const int64_t plane = d * bits / 8, groups = d / group;
  const int64_t rows = 37, stride = plane + 16;
  ASSERT_LE(static_cast<std::size_t>(rows * stride), bytes.size());
  const auto ws = random_values(static_cast<std::size_t>(groups * nq * rows), 18);
  std::vector<float> acc = random_values(static_cast<std::size_t>(nq * (d + 2)), 19), ref = acc;
  const auto biases = random_values(static_cast<std::size_t>(groups * nq), 23);
  const float* bias = nq % 2 == 1 ? biases.data() : nullptr;  // with and without
  const PlaneValueRows tile{bytes.data(), stride, rows, plane, bits, group};
  accumulate_planes(tile, {ws.data(), bias, nq, acc.data(), d + 2});
  scalar::accumulate_planes(tile, {ws.data(), bias, nq, ref.data(), d + 2});
  for (std::size_t i = 0; i < acc.size(); ++i) {
    ASSERT_NEAR(acc[i], ref[i], 1e-3f * (1 << bits))
        << "bits " << bits << " d " << d << " group " << group << " nq " << nq;
  }
}

TEST(TileKernels, AccumulatePlanesMatchesScalar) {
  // 37 rows 16 bytes past the plane apart (the widest plane is 8-bit codes of d 128: 128 bytes).
  // The stride was a fixed 80 once, shorter than that plane, so the last rows read past the
  // vector (AddressSanitizer, 2026-12-05): kernel and reference compared bytes outside the input.
  std::vector<uint8_t> bytes(std::size_t{37} * (128 + 16));
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 73 + 5);
  for (int bits : {2, 4, 8}) {
    for (int64_t d : {64, 128}) {
      for (int64_t group : {32, 64}) {
        if (!can_accumulate_planes(bits, d * bits / 8, group)) continue;
        for (int64_t nq : {1, 2, 3, 4, 7}) {
          check_accumulate_planes(bytes, bits, d, group, nq);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  // 2-bit codes need groups of at least 32 channels per 8-byte chunk; 16 does not qualify.
  EXPECT_FALSE(can_accumulate_planes(2, 16, 16));
  EXPECT_TRUE(can_accumulate_planes(4, 32, 32));
}

// For 1, 5 and 37 rows: every FMA target's sums equal the first one's bit for bit.
void check_targets_agree(const std::vector<uint8_t>& bytes, int bits, int64_t d, int64_t group, int64_t nq) {
  const int64_t plane = d * bits / 8, groups = d / group;
  for (int64_t rows : {1, 5, 37}) {
    const int64_t stride = plane + 16;
    const auto ws = random_values(static_cast<std::size_t>(groups * nq * rows), 28);
    const std::vector<float> start = random_values(static_cast<std::size_t>(nq * (d + 2)), 29);
    const auto biases = random_values(static_cast<std::size_t>(groups * nq), 33);
    const float* bias = nq % 2 == 1 ? biases.data() : nullptr;
    std::vector<float> first;
    std::string first_target;
    test_support::for_each_simd_target([&](const char* target, int64_t id) {
      // x86 targets with fused multiply-adds (AVX2, AVX3, AVX3_DL): SSE4's MulAdd rounds twice.
      if (id > HWY_AVX2) return;
      std::vector<float> acc = start;
      accumulate_planes({bytes.data(), stride, rows, plane, bits, group}, {ws.data(), bias, nq, acc.data(), d + 2});
      if (first.empty()) {
        first = acc;
        first_target = target;
        return;
      }
      ASSERT_EQ(acc, first) << target << " vs " << first_target << ": bits " << bits << " d " << d << " group " << group
                            << " nq " << nq << " rows " << rows;
    });
  }
}

// Every FMA target accumulates each value lane with the same chain of fused multiply-adds (the
// lane's accumulator plus its group's bias, then the rows in order), whatever its vector width:
// AVX3's 16-lane passes — including the one over two 8-byte channel groups of 2-bit codes in
// groups of 32, each half with its own group's weights — give the 8-lane targets' bits.
TEST(TileKernels, AccumulatePlanesIsBitIdenticalOnEverySimdTarget) {
  std::vector<uint8_t> bytes(std::size_t{37} * (128 + 16));
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 73 + 5);
  for (int bits : {2, 4, 8}) {
    for (int64_t d : {64, 128}) {
      for (int64_t group : {32, 64}) {
        if (!can_accumulate_planes(bits, d * bits / 8, group)) continue;
        for (int64_t nq : {1, 2, 3, 4, 7}) {
          check_targets_agree(bytes, bits, d, group, nq);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}
}  // namespace
}  // namespace veloxquant::attention::kernels

namespace veloxquant::attention::kernels {
namespace {
TEST(TileKernels, GatherPairsMatchesScalar) {
  for (int64_t n : {1, 7, 8, 64, 100}) {
    const auto pairs = random_values(static_cast<std::size_t>(2 * n), 40);
    std::vector<int32_t> natural(static_cast<std::size_t>(n));
    for (int64_t c = 0; c < n; ++c) natural[static_cast<std::size_t>(c)] = static_cast<int32_t>((c * 37 + 11) % n);
    std::vector<float> a(natural.size()), b(natural.size()), a_ref(natural.size()), b_ref(natural.size());
    gather_pairs(pairs.data(), natural.data(), n, a.data(), b.data());
    scalar::gather_pairs(pairs.data(), natural.data(), n, a_ref.data(), b_ref.data());
    EXPECT_EQ(a, a_ref);
    EXPECT_EQ(b, b_ref);
  }
}
}  // namespace
}  // namespace veloxquant::attention::kernels
