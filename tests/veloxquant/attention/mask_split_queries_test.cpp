// Queries split by a channel mask into two integer planes (attention/mask_split_queries.h): every
// compiled target gives the scalar reference's integers and steps bit for bit, and the reference
// equals the way kitty built them before (each plane gathered into its padded code order, then
// fold_queries_i16 with unit scales and zero mins).
#include <gtest/gtest.h>

#include <hwy/highway.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/integer_key_scores.h"
#include "veloxquant/attention/mask_split_queries.h"
#include "veloxquant/attention/narrow_plane_scores.h"

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

TEST(MaskSplitQueries, EveryTargetMatchesTheScalarReferenceAndThePaddedFold) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // kitty's defaults at head_dim 64 (16 channels at 4 bits, 48 at 2), 8/4 bits, a partial mask
  // word (d = 40), wider heads, an all-zero query.
  for (const Case c :
       {Case{64, 4, 2, 16}, Case{64, 8, 4, 5}, Case{40, 4, 2, 10}, Case{128, 4, 2, 32}, Case{96, 2, 2, 47}}) {
    const NarrowPlane hi = narrow_plane(c.hi_bits, c.n_hi), lo = narrow_plane(c.lo_bits, c.d - c.n_hi);
    const SplitPlane planes[2] = {plane_of(hi), plane_of(lo)};
    for (const int64_t n_q : {int64_t{1}, int64_t{3}, int64_t{48}}) {
      // A random mask with exactly n_hi channels set.
      std::vector<int64_t> channels(static_cast<std::size_t>(c.d));
      for (int64_t i = 0; i < c.d; ++i) channels[static_cast<std::size_t>(i)] = i;
      std::shuffle(channels.begin(), channels.end(), rng);
      std::vector<uint32_t> mask(static_cast<std::size_t>((c.d + 31) / 32), 0u);
      for (int64_t i = 0; i < c.n_hi; ++i) {
        const int64_t ch = channels[static_cast<std::size_t>(i)];
        mask[static_cast<std::size_t>(ch / 32)] |= 1u << (ch % 32);
      }
      std::vector<float> x(static_cast<std::size_t>(n_q * c.d));
      for (float& v : x) v = normal(rng) * 3.0f;
      if (n_q > 1) std::fill(x.begin(), x.begin() + c.d, 0.0f);  // query 0 all zero: steps 0
      const int64_t q0 = n_q * planes[0].dim, q1 = n_q * planes[1].dim;
      std::vector<int16_t> ref0(static_cast<std::size_t>(q0)), ref1(static_cast<std::size_t>(q1));
      std::vector<float> rs0(static_cast<std::size_t>(n_q)), rs1(rs0.size());
      scalar::split_queries_i16(x.data(), n_q, c.d, mask.data(), planes, ref0.data(), rs0.data(), ref1.data(),
                                rs1.data());
      // The padded fold, as kitty built its integer queries before this kernel.
      {
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
        std::vector<int16_t> f0(ref0.size()), f1(ref1.size());
        std::vector<float> s0(rs0.size()), s1(rs0.size()), b(rs0.size());
        fold_queries_i16(padded0.data(), n_q, planes[0].dim, ones.data(), zeros.data(), planes[0].limit, f0.data(),
                         s0.data(), b.data());
        fold_queries_i16(padded1.data(), n_q, planes[1].dim, ones.data(), zeros.data(), planes[1].limit, f1.data(),
                         s1.data(), b.data());
        ASSERT_EQ(ref0, f0) << "d " << c.d << " n_q " << n_q;
        ASSERT_EQ(ref1, f1) << "d " << c.d << " n_q " << n_q;
        ASSERT_EQ(rs0, s0);
        ASSERT_EQ(rs1, s1);
      }
      for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        std::vector<int16_t> got0(ref0.size(), -7), got1(ref1.size(), -7);
        std::vector<float> gs0(rs0.size(), -1.0f), gs1(rs0.size(), -1.0f);
        split_queries_i16(x.data(), n_q, c.d, mask.data(), planes, got0.data(), gs0.data(), got1.data(), gs1.data());
        hwy::SetSupportedTargetsForTest(0);
        for (std::size_t i = 0; i < got1.size(); ++i) {
          ASSERT_EQ(got1[i], ref1[i]) << hwy::TargetName(target) << " d " << c.d << " n_q " << n_q << " at " << i;
        }
        ASSERT_EQ(got0, ref0) << hwy::TargetName(target) << " d " << c.d << " n_q " << n_q;
        ASSERT_EQ(got1, ref1) << hwy::TargetName(target) << " d " << c.d << " n_q " << n_q;
        ASSERT_EQ(gs0, rs0) << hwy::TargetName(target);
        ASSERT_EQ(gs1, rs1) << hwy::TargetName(target);
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
