// Queries split by a channel mask into two integer planes (attention/mask_split_queries.h): every
// compiled target gives the scalar reference's integers and steps bit for bit, and the reference
// equals the way kitty built them before (each plane gathered into its padded code order, then
// fold_queries_i16 with unit scales and zero mins).
#include <gtest/gtest.h>

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/integer_key_scores.h"
#include "veloxquant/attention/mask_split_queries.h"
#include "veloxquant/attention/narrow_plane_scores.h"
#include "support/simd_targets.h"

namespace veloxquant::attention::kernels {
namespace {

struct Case {
  int64_t d;
  int hi_bits, lo_bits;
  int64_t n_hi;
};

SplitPlane plane_of(const NarrowPlane& p) {
  SplitPlane s;
  s.per_byte = 8 / p.bits;
  s.padded = p.padded;
  s.dim = p.dim();
  s.limit = integer_query_limit(p.bits, p.dim());
  return s;
}

// A random mask with exactly n_hi of the d channels set.
std::vector<uint32_t> random_mask(const Case& c, std::mt19937& rng) {
  std::vector<int64_t> channels(static_cast<std::size_t>(c.d));
  for (int64_t i = 0; i < c.d; ++i) channels[static_cast<std::size_t>(i)] = i;
  std::shuffle(channels.begin(), channels.end(), rng);
  std::vector<uint32_t> mask(static_cast<std::size_t>((c.d + 31) / 32), 0u);
  for (int64_t i = 0; i < c.n_hi; ++i) {
    const int64_t ch = channels[static_cast<std::size_t>(i)];
    mask[static_cast<std::size_t>(ch / 32)] |= 1u << (ch % 32);
  }
  return mask;
}

// Both planes' integer queries (q0, q1) and steps (s0, s1).
struct SplitQueries {
  std::vector<int16_t> q0, q1;
  std::vector<float> s0, s1;
};

// The padded fold, as kitty built its integer queries before this kernel: each plane gathered
// into its padded code order, then fold_queries_i16 with unit scales and zero mins.
SplitQueries padded_fold(const std::vector<float>& x, int64_t n_q, const Case& c, const std::vector<uint32_t>& mask,
                         const NarrowPlane& hi, const NarrowPlane& lo, const SplitPlane* planes) {
  const int64_t q0 = n_q * planes[0].dim, q1 = n_q * planes[1].dim;
  std::vector<float> padded0(static_cast<std::size_t>(q0), 0.0f), padded1(static_cast<std::size_t>(q1), 0.0f);
  for (int64_t r = 0; r < n_q; ++r) {
    int64_t i0 = 0, i1 = 0;
    for (int64_t ch = 0; ch < c.d; ++ch) {
      const float v = x[static_cast<std::size_t>(r * c.d + ch)];
      if ((mask[static_cast<std::size_t>(ch / 32)] >> (ch % 32)) & 1u) {
        padded0[static_cast<std::size_t>(r * planes[0].dim + hi.position(i0++))] = v;
      } else {
        padded1[static_cast<std::size_t>(r * planes[1].dim + lo.position(i1++))] = v;
      }
    }
  }
  const int64_t widest = std::max(planes[0].dim, planes[1].dim);
  const std::vector<float> ones(static_cast<std::size_t>(widest), 1.0f), zeros(ones.size(), 0.0f);
  SplitQueries f{std::vector<int16_t>(static_cast<std::size_t>(q0)), std::vector<int16_t>(static_cast<std::size_t>(q1)),
                 std::vector<float>(static_cast<std::size_t>(n_q)), std::vector<float>(static_cast<std::size_t>(n_q))};
  std::vector<float> b(static_cast<std::size_t>(n_q));
  fold_queries_i16(padded0.data(), n_q, planes[0].dim, ones.data(), zeros.data(), planes[0].limit, f.q0.data(),
                   f.s0.data(), b.data());
  fold_queries_i16(padded1.data(), n_q, planes[1].dim, ones.data(), zeros.data(), planes[1].limit, f.q1.data(),
                   f.s1.data(), b.data());
  return f;
}

// n_q random queries (query 0 all zero when there are several: steps 0) under a random mask:
// the scalar reference equals the padded fold, and every target equals the reference.
void check_split(const Case& c, int64_t n_q, std::mt19937& rng, std::normal_distribution<float>& normal) {
  const NarrowPlane hi = narrow_plane(c.hi_bits, c.n_hi), lo = narrow_plane(c.lo_bits, c.d - c.n_hi);
  const SplitPlane planes[2] = {plane_of(hi), plane_of(lo)};
  const std::vector<uint32_t> mask = random_mask(c, rng);
  std::vector<float> x(static_cast<std::size_t>(n_q * c.d));
  for (float& v : x) v = normal(rng) * 3.0f;
  if (n_q > 1) std::fill(x.begin(), x.begin() + c.d, 0.0f);
  SplitQueries ref{std::vector<int16_t>(static_cast<std::size_t>(n_q * planes[0].dim)),
                   std::vector<int16_t>(static_cast<std::size_t>(n_q * planes[1].dim)),
                   std::vector<float>(static_cast<std::size_t>(n_q)),
                   std::vector<float>(static_cast<std::size_t>(n_q))};
  scalar::split_queries_i16(x.data(), n_q, c.d, mask.data(), planes, ref.q0.data(), ref.s0.data(), ref.q1.data(),
                            ref.s1.data());
  const SplitQueries fold = padded_fold(x, n_q, c, mask, hi, lo, planes);
  ASSERT_EQ(ref.q0, fold.q0) << "d " << c.d << " n_q " << n_q;
  ASSERT_EQ(ref.q1, fold.q1) << "d " << c.d << " n_q " << n_q;
  ASSERT_EQ(ref.s0, fold.s0);
  ASSERT_EQ(ref.s1, fold.s1);
  test_support::for_each_simd_target([&](const char* target) {
    std::vector<int16_t> got0(ref.q0.size(), -7), got1(ref.q1.size(), -7);
    std::vector<float> gs0(ref.s0.size(), -1.0f), gs1(ref.s0.size(), -1.0f);
    split_queries_i16(x.data(), n_q, c.d, mask.data(), planes, got0.data(), gs0.data(), got1.data(), gs1.data());
    for (std::size_t i = 0; i < got1.size(); ++i) {
      ASSERT_EQ(got1[i], ref.q1[i]) << target << " d " << c.d << " n_q " << n_q << " at " << i;
    }
    ASSERT_EQ(got0, ref.q0) << target << " d " << c.d << " n_q " << n_q;
    ASSERT_EQ(got1, ref.q1) << target << " d " << c.d << " n_q " << n_q;
    ASSERT_EQ(gs0, ref.s0) << target;
    ASSERT_EQ(gs1, ref.s1) << target;
  });
}

TEST(MaskSplitQueries, EveryTargetMatchesTheScalarReferenceAndThePaddedFold) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // kitty's defaults at head_dim 64 (16 channels at 4 bits, 48 at 2), 8/4 bits, a partial mask
  // word (d = 40), wider heads, an all-zero query.
  for (const Case c :
       {Case{64, 4, 2, 16}, Case{64, 8, 4, 5}, Case{40, 4, 2, 10}, Case{128, 4, 2, 32}, Case{96, 2, 2, 47}}) {
    for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{48}}) {
      check_split(c, n_q, rng, normal);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
