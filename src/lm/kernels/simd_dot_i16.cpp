// Highway's foreach_target re-includes this file once per SIMD target; HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled target on first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/simd_dot_i16.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "lm/kernels/i16_wide_blocks-inl.h"
#include "lm/kernels/iq4_values-inl.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lm/kernels/simd_dot_i16.h"
#include "lm/weights/block_formats.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 16 i16 lanes (256 bits) where the target has them: half an activation block per vector,
// and exactly one Q6_K scale group. Narrower targets step through in more vectors; every
// loop below covers a block in whole vectors, so no masking is needed.
using DI16 = hn::CappedTag<int16_t, 16>;
using DU8 = hn::Rebind<uint8_t, DI16>;
using DI8 = hn::Rebind<int8_t, DI16>;
using DI32 = hn::Repartition<int32_t, DI16>;
using DF = hn::Repartition<float, DI16>;
using VI16 = hn::Vec<DI16>;
using VI32 = hn::Vec<DI32>;

HWY_INLINE float f16_scale(uint16_t bits) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  hwy::float16_t h[1];
  std::memcpy(h, &bits, sizeof bits);
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, h)));
}

// sum0 (+ sum1) += pairwise products of w and x (pmaddwd on x86; some targets split the
// lanes over both accumulators, so callers add them before use).
HWY_INLINE VI32 madd(VI16 w, VI16 x, VI32 sum0, VI32& sum1) {
  return hn::ReorderWidenMulAccumulate(DI32(), w, x, sum0, sum1);
}

HWY_INLINE float reduce(hn::Vec<DF> v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

// sum(w * q) of one Q4 block (32 nibbles: elements 0..15 low, 16..31 high) with its
// activation block, as i32 lanes. The 16 code bytes are widened to i16 once; the nibbles are
// then split in 16-bit lanes (the high one needs no mask there).
HWY_INLINE VI32 q4_block_sum(const uint8_t* qs, const int16_t* x) {
  const DI16 di16;
  const DU8 du8;
  const size_t N = hn::Lanes(di16);
  const auto mask = hn::Set(di16, 0x0f);
  VI32 s0 = hn::Zero(DI32()), s1 = hn::Zero(DI32());
  for (size_t j = 0; j < 16; j += N) {
    const auto q = hn::PromoteTo(di16, hn::LoadU(du8, qs + j));
    s0 = madd(hn::And(q, mask), hn::LoadU(di16, x + j), s0, s1);
    s0 = madd(hn::ShiftRight<4>(q), hn::LoadU(di16, x + 16 + j), s0, s1);
  }
  return hn::Add(s0, s1);
}

// (d, m) of a Q4_1 block times (dx, dx * sum(qx)) of its activation block, in one 2-lane
// conversion and multiply: lane 0 scales the block's integer sum, lane 1 is its min term.
HWY_INLINE hn::Vec<hn::CappedTag<float, 2>> q4_1_scales(const BlockQ4_1& block, const I16Block& x) {
  const hn::CappedTag<float, 2> d2;
  const hn::Rebind<hwy::float16_t, decltype(d2)> dh2;
  return hn::Mul(hn::PromoteTo(d2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(&block.d))),
                 hn::LoadU(d2, &x.d));
}

void QuantizeI16(const float* x, int64_t n, I16Block* out) {
  const hn::CappedTag<float, 8> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int16_t, decltype(df)> di16;
  const size_t N = hn::Lanes(df);
  for (int64_t b = 0; b < n / kI16Block; ++b, x += kI16Block) {
    auto amax = hn::Zero(df);
    for (size_t j = 0; j < kI16Block; j += N) amax = hn::Max(amax, hn::Abs(hn::LoadU(df, x + j)));
    const float d = hn::GetLane(hn::MaxOfLanes(df, amax)) / 32767.0f;
    const auto inv = hn::Set(df, d != 0.0f ? 1.0f / d : 0.0f);
    auto sum = hn::Zero(di32);
    for (size_t j = 0; j < kI16Block; j += N) {
      const auto q = hn::NearestInt(hn::Mul(hn::LoadU(df, x + j), inv));
      sum = hn::Add(sum, q);
      hn::StoreU(hn::DemoteTo(di16, q), di16, out[b].q + j);
    }
    out[b].d = d;
    out[b].sum = d * static_cast<float>(hn::GetLane(hn::SumOfLanes(di32, sum)));
  }
}

// Where the batched scaling reads the activation blocks' d and sum: gathered from the I16Blocks
// themselves (one row's dot), or loaded from contiguous copies that a range of rows sharing one
// activation vector makes once (DotI16Rows; 8 zero floats of padding after the last block, so
// a group of four may load eight). The values, and so the results, are the same either way.
struct ActivationScales {
  const I16Block* x;
  const float* d = nullptr;
  const float* sum = nullptr;
};

// Eight blocks' scaling at once (256-bit x86 targets). Per block, the scalar route costs as
// much as the block's integer work: load the f16 weight scale, convert it, multiply by the
// activation scale, broadcast, convert the sums, multiply-add — eight instructions beside
// four of data on Q8_0. Batched, eight blocks' i32 sum vectors are reduced into one vector
// (lane k: block k's whole sum) by an interleave-and-add transposition, and the eight weight
// scales and eight activation scales are each put in one vector.
// (The macro is reset for each target foreach_target compiles.)
#undef VQ_I16_BATCHED_SCALES
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define VQ_I16_BATCHED_SCALES 1
#undef VQ_I16_WIDE_BLOCKS
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// 512-bit block sums and scale loads (i16_wide_blocks-inl.h).
#define VQ_I16_WIDE_BLOCKS 1
#endif
using DI64 = hn::Repartition<int64_t, DI16>;

// Per 128-bit half: [sum(a), sum(b), sum(c), sum(d)] over that half's lanes, from four
// 8-lane i32 vectors (i32 sums are exact, so the batched route is as exact as the per-block
// one).
HWY_INLINE VI32 quad_sums(VI32 a, VI32 b, VI32 c, VI32 d) {
  const DI32 di32;
  const DI64 di64;
  // Per half: [a0+a2, b0+b2, a1+a3, b1+b3], and the same of c, d.
  const auto ab = hn::BitCast(di64, hn::Add(hn::InterleaveLower(di32, a, b), hn::InterleaveUpper(di32, a, b)));
  const auto cd = hn::BitCast(di64, hn::Add(hn::InterleaveLower(di32, c, d), hn::InterleaveUpper(di32, c, d)));
  return hn::Add(hn::BitCast(di32, hn::InterleaveLower(di64, ab, cd)),
                 hn::BitCast(di32, hn::InterleaveUpper(di64, ab, cd)));
}

// [sum(a) .. sum(d) | sum(e) .. sum(h)]: both halves of two quad_sums results added.
HWY_INLINE VI32 sums_of_8(VI32 q0, VI32 q1) {
  const DI32 di32;
  return hn::Add(hn::ConcatLowerLower(di32, q1, q0), hn::ConcatUpperUpper(di32, q1, q0));
}

// Eight 32-bit words `stride` bytes apart from `first`, and eight floats `stride` floats
// apart; lanes from `count` on repeat the first (their block sums are zero). Built from
// scalar loads and inserts rather than vpgatherdd / vgatherdps: on this project's Zen 2 host
// a gather costs about twice the micro-ops of the loads it replaces (measured: the gather
// version of these kernels decoded SmolLM2 ~15% slower despite fewer instructions).
HWY_INLINE VI32 words_of_8(const uint8_t* first, size_t stride, int count) {
  const auto at = [&](int k) {
    int32_t v;
    std::memcpy(&v, first + static_cast<size_t>(k < count ? k : 0) * stride, sizeof v);
    return v;
  };
  __m128i lo = _mm_cvtsi32_si128(at(0));
  lo = _mm_insert_epi32(lo, at(1), 1);
  lo = _mm_insert_epi32(lo, at(2), 2);
  lo = _mm_insert_epi32(lo, at(3), 3);
  __m128i hi = _mm_cvtsi32_si128(at(4));
  hi = _mm_insert_epi32(hi, at(5), 1);
  hi = _mm_insert_epi32(hi, at(6), 2);
  hi = _mm_insert_epi32(hi, at(7), 3);
  return VI32{_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1)};
}
HWY_INLINE hn::Vec<DF> floats_of_8(const float* first, size_t stride, int count) {
  const auto at = [&](int k) { return first[static_cast<size_t>(k < count ? k : 0) * stride]; };
  return hn::Vec<DF>{_mm256_setr_ps(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7))};
}
// Floats in I16Block steps (the activation blocks' d or sum).
constexpr size_t kI16BlockFloats = sizeof(I16Block) / sizeof(float);
static_assert(sizeof(I16Block) % sizeof(float) == 0);

// The whole sums of blocks k..k+7, one per lane: from each block's i32 sum vector
// (block_sum(j)), or on AVX-512 from 512-bit pair vectors (pair(j): blocks j and j + 4).
template <class BlockSum>
HWY_INLINE VI32 sums_of_blocks(int64_t k, const BlockSum& block_sum) {
  return sums_of_8(quad_sums(block_sum(k), block_sum(k + 1), block_sum(k + 2), block_sum(k + 3)),
                   quad_sums(block_sum(k + 4), block_sum(k + 5), block_sum(k + 6), block_sum(k + 7)));
}
#ifdef VQ_I16_WIDE_BLOCKS
template <class PairSum>
HWY_INLINE VI32 sums_of_pairs(int64_t k, const PairSum& pair) {
  return VI32{totals_of_8(pair(k), pair(k + 1), pair(k + 2), pair(k + 3))};
}
#endif

// The f16 scale word (and, above it, the next 16 bits: Q4_1's minimum) of blocks k..k+7, one
// per i32 lane.
HWY_INLINE VI32 scale_words_of_8(const uint8_t* first, size_t stride, int count) {
#ifdef VQ_I16_WIDE_BLOCKS
  if (count == 8 && stride == sizeof(BlockQ4_1)) return VI32{q4_1_scale_words(first)};
    // (Q8_0's 34-byte blocks: a two-source word or byte permutation measured slower than the
    // scalar loads and inserts of words_of_8.)
#endif
  return words_of_8(first, stride, count);
}

// Blocks [0, nb) of a row in groups of eight, then one of four, while eight or four remain:
// acc += (block sums) * dw * dx lane-wise; with `min_acc`, min_acc += dw * (dx * sum(qx)) too
// (the offset term of Q4_0 / Q5_0 style formats), or with `own_min` the block's own f16
// minimum, stored right after its scale (Q4_1: min_acc += m * (dx * sum(qx))). Returns how
// many blocks it took; the caller's per-block loop does the rest. block_sum(k): block k's
// i32 sum vector; sums_of_8(k): the whole sums of blocks k..k+7, one per lane (integer sums
// are exact, so any kernel that computes them gives the same lanes).
template <class BlockSum, class EightSums>
HWY_INLINE int64_t scaled_groups_with(const void* blocks, int32_t stride, const ActivationScales& xs, int64_t nb,
                                      const BlockSum& block_sum, const EightSums& eight_sums, hn::Vec<DF>& acc,
                                      hn::Vec<DF>* min_acc, bool own_min) {
  const DF df;
  const auto group = [&](int64_t k, int count) {
    const VI32 sums8 = count == 8
                           ? eight_sums(k)
                           : sums_of_8(quad_sums(block_sum(k), block_sum(k + 1), block_sum(k + 2), block_sum(k + 3)),
                                       hn::Zero(DI32()));
    const auto* first = static_cast<const uint8_t*>(blocks) + k * stride;
    const DI32 di32;
    const hn::Rebind<uint16_t, DF> du16;  // (masked to 16 bits: the saturating i32 -> u16 demotion is exact)
    const hn::Rebind<hwy::float16_t, DF> df16;
    const auto bits = scale_words_of_8(first, static_cast<size_t>(stride), count);
    const auto dw = hn::PromoteTo(df, hn::BitCast(df16, hn::DemoteTo(du16, hn::And(bits, hn::Set(di32, 0xffff)))));
    const auto dx = xs.d ? hn::LoadU(df, xs.d + k) : floats_of_8(&xs.x[k].d, kI16BlockFloats, count);
    acc = hn::MulAdd(hn::ConvertTo(df, sums8), hn::Mul(dw, dx), acc);
    // Lanes past `count` repeat block k's sum: masked off here (their block sums were zero above).
    if (min_acc) {
      auto sums = xs.sum ? hn::LoadU(df, xs.sum + k) : floats_of_8(&xs.x[k].sum, kI16BlockFloats, count);
      if (count != 8) sums = hn::IfThenElseZero(hn::Lt(hn::Iota(df, 0), hn::Set(df, static_cast<float>(count))), sums);
      // (The i32 shift is arithmetic: masked again, or a minimum with its top bit set would saturate to 0.)
      const auto dm = own_min ? hn::PromoteTo(df, hn::BitCast(df16, hn::DemoteTo(du16, hn::And(hn::ShiftRight<16>(bits),
                                                                                               hn::Set(di32, 0xffff)))))
                              : dw;
      *min_acc = hn::MulAdd(dm, sums, *min_acc);
    }
  };
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) group(b, 8);
  if (b + 4 <= nb) {
    group(b, 4);
    b += 4;
  }
  return b;
}

// scaled_groups_with over one row's own I16Blocks, the eight sums from block_sum.
template <class BlockSum>
HWY_INLINE int64_t scaled_groups(const void* blocks, int32_t stride, const I16Block* x, int64_t nb,
                                 const BlockSum& block_sum, hn::Vec<DF>& acc, hn::Vec<DF>* min_acc,
                                 bool own_min = false) {
  const auto eight_sums = [&](int64_t k) { return sums_of_blocks(k, block_sum); };
  return scaled_groups_with(blocks, stride, ActivationScales{x}, nb, block_sum, eight_sums, acc, min_acc, own_min);
}
#endif

// Q4_0: w = dw * (q - 8), so a block gives dw * dx * sum(q * qx) - 8 * dw * (dx * sum(qx)).
// xs: the activation blocks, with or without contiguous scale copies (the same result).
HWY_INLINE float q4_0_dot(const BlockQ4_0* blocks, const ActivationScales& xs, int64_t nb) {
  const DF df;
  const I16Block* x = xs.x;
  auto acc = hn::Zero(df);
  float offset = 0.0f;
  int64_t b = 0;
  const auto block_sum = [&](int64_t k) { return q4_block_sum(blocks[k].qs, x[k].q); };
#ifdef VQ_I16_BATCHED_SCALES
#ifdef VQ_I16_WIDE_BLOCKS
  const auto eight_sums = [&](int64_t k) {
    return sums_of_pairs(k,
                         [&](int64_t j) { return q4_pair_sums(blocks[j].qs, blocks[j + 4].qs, x[j].q, x[j + 4].q); });
  };
#else
  const auto eight_sums = [&](int64_t k) { return sums_of_blocks(k, block_sum); };
#endif
  auto offsets = hn::Zero(df);
  b = scaled_groups_with(blocks, sizeof(BlockQ4_0), xs, nb, block_sum, eight_sums, acc, &offsets, false);
  offset = reduce(offsets);
#endif
  for (; b < nb; ++b) {
    const float dw = f16_scale(blocks[b].d);
    acc = hn::MulAdd(hn::ConvertTo(df, block_sum(b)), hn::Set(df, dw * x[b].d), acc);
    offset += dw * x[b].sum;
  }
  return reduce(acc) - 8.0f * offset;
}

float DotI16Q4_0(const void* row, const I16Block* x, int64_t n) {
  return q4_0_dot(static_cast<const BlockQ4_0*>(row), ActivationScales{x}, n / kQK4_0);
}

#ifdef VQ_I16_BATCHED_SCALES
// Q4_1 with batched scales: groups of eight blocks (on AVX-512 their sums from 512-bit pairs),
// then per-block. xs: the activation blocks, with or without contiguous scale copies (the
// same result either way).
HWY_INLINE float q4_1_batched(const BlockQ4_1* blocks, const ActivationScales& xs, int64_t nb) {
  const DF df;
  const I16Block* x = xs.x;
  auto acc = hn::Zero(df), min_acc = hn::Zero(df);
  const auto block_sum = [&](int64_t k) { return q4_block_sum(blocks[k].qs, x[k].q); };
#ifdef VQ_I16_WIDE_BLOCKS
  const auto eight_sums = [&](int64_t k) {
    return sums_of_pairs(k,
                         [&](int64_t j) { return q4_pair_sums(blocks[j].qs, blocks[j + 4].qs, x[j].q, x[j + 4].q); });
  };
#else
  const auto eight_sums = [&](int64_t k) { return sums_of_blocks(k, block_sum); };
#endif
  int64_t b = scaled_groups_with(blocks, sizeof(BlockQ4_1), xs, nb, block_sum, eight_sums, acc, &min_acc,
                                 /*own_min=*/true);
  float mins = reduce(min_acc);
  for (; b < nb; ++b) {
    acc = hn::MulAdd(hn::ConvertTo(df, block_sum(b)), hn::Set(df, f16_scale(blocks[b].d) * x[b].d), acc);
    mins += f16_scale(blocks[b].m) * x[b].sum;
  }
  return reduce(acc) + mins;
}
#endif

// Q4_1: w = d * q + m: d * dx * sum(q * qx) + m * (dx * sum(qx)).
float DotI16Q4_1(const void* row, const I16Block* x, int64_t n) {
  const DF df;
  const hn::CappedTag<float, 2> d2;
  const auto* blocks = static_cast<const BlockQ4_1*>(row);
  const int64_t nb = n / kQK4_1;
#ifdef VQ_I16_BATCHED_SCALES
  return q4_1_batched(blocks, ActivationScales{x}, nb);
#endif
  if constexpr (hn::MaxLanes(decltype(d2)()) < 2) {
    // One-lane targets: the scales one at a time.
    auto acc = hn::Zero(df);
    float mins = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      acc = hn::MulAdd(hn::ConvertTo(df, q4_block_sum(blocks[b].qs, x[b].q)),
                       hn::Set(df, f16_scale(blocks[b].d) * x[b].d), acc);
      mins += f16_scale(blocks[b].m) * x[b].sum;
    }
    return reduce(acc) + mins;
  } else {
    // Two accumulators (even / odd blocks) so consecutive blocks do not wait on each other;
    // lane 1 of `mins` collects the min terms (lane 0 is unused).
    auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
    auto mins = hn::Zero(d2);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      const auto s0 = q4_1_scales(blocks[b], x[b]), s1 = q4_1_scales(blocks[b + 1], x[b + 1]);
      acc0 = hn::MulAdd(hn::ConvertTo(df, q4_block_sum(blocks[b].qs, x[b].q)), hn::Set(df, hn::GetLane(s0)), acc0);
      acc1 =
          hn::MulAdd(hn::ConvertTo(df, q4_block_sum(blocks[b + 1].qs, x[b + 1].q)), hn::Set(df, hn::GetLane(s1)), acc1);
      mins = hn::Add(mins, hn::Add(s0, s1));
    }
    if (b < nb) {
      const auto s0 = q4_1_scales(blocks[b], x[b]);
      acc0 = hn::MulAdd(hn::ConvertTo(df, q4_block_sum(blocks[b].qs, x[b].q)), hn::Set(df, hn::GetLane(s0)), acc0);
      mins = hn::Add(mins, s0);
    }
    float lanes[hn::MaxLanes(decltype(d2)())];
    hn::StoreU(mins, d2, lanes);
    return reduce(hn::Add(acc0, acc1)) + lanes[1];
  }
}

// Q8_0: dw * dx * sum(q * qx) per block. xs: the activation blocks, with or without contiguous
// scale copies (the same result either way).
HWY_INLINE float q8_0_dot(const BlockQ8_0* blocks, const ActivationScales& xs, int64_t nb) {
  const DI16 di16;
  const DI8 di8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const I16Block* x = xs.x;
  const auto block_sum = [&](int64_t k) {
    VI32 s0 = hn::Zero(DI32()), s1 = hn::Zero(DI32());
    for (size_t j = 0; j < 32; j += N)
      s0 = madd(hn::PromoteTo(di16, hn::LoadU(di8, blocks[k].qs + j)), hn::LoadU(di16, x[k].q + j), s0, s1);
    return hn::Add(s0, s1);
  };
  const auto block = [&](int64_t k, hn::Vec<DF> acc) {
    return hn::MulAdd(hn::ConvertTo(df, block_sum(k)), hn::Set(df, f16_scale(blocks[k].d) * x[k].d), acc);
  };
  int64_t b = 0;
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
#ifdef VQ_I16_BATCHED_SCALES
#ifdef VQ_I16_WIDE_BLOCKS
  const auto eight_sums = [&](int64_t k) {
    return sums_of_pairs(k,
                         [&](int64_t j) { return q8_pair_sums(blocks[j].qs, blocks[j + 4].qs, x[j].q, x[j + 4].q); });
  };
#else
  const auto eight_sums = [&](int64_t k) { return sums_of_blocks(k, block_sum); };
#endif
  // Eight blocks a step, then four (Gemma's 640-wide rows are 8 + 8 + 4 blocks).
  b = scaled_groups_with(blocks, sizeof(BlockQ8_0), xs, nb, block_sum, eight_sums, acc0, nullptr, false);
#endif
  for (; b + 2 <= nb; b += 2) {
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
  }
  if (b < nb) acc0 = block(b, acc0);
  return reduce(hn::Add(acc0, acc1));
}

float DotI16Q8_0(const void* row, const I16Block* x, int64_t n) {
  return q8_0_dot(static_cast<const BlockQ8_0*>(row), ActivationScales{x}, n / kQK8_0);
}

// Q4_K: sub-block j of a super-block (32 elements) lines up with one activation block:
// d * sc_j * dx * sum(q * qx) - dmin * mn_j * (dx * sum(qx)).
float DotI16Q4_K(const void* row, const I16Block* x, int64_t n) {
  const DI16 di16;
  const DU8 du8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const auto* blocks = static_cast<const BlockQ4_K*>(row);
  const auto mask = hn::Set(du8, 0x0f);
  auto acc = hn::Zero(df);
  float mins = 0.0f;
#ifdef VQ_I16_BATCHED_SCALES
  // A super-block's eight sub-blocks are one vector's lanes: their sums reduced by the
  // transposition, the eight 6-bit scales and mins unpacked with word masks (the layout of
  // unpack_q4_k_scale, four bytes at a time) and widened, the activation scales and sums
  // put in one vector each: d * sc * dx * sum(q * qx) lane-wise, dmin * mn * (dx * sum(qx)) beside it.
  {
    const DI32 di32;
    const hn::Rebind<uint8_t, DF> du8x8;
    auto min_acc = hn::Zero(df);
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
      const BlockQ4_K& block = blocks[b];
      VI32 sums[8];
      for (int g = 0; g < 4; ++g) {
        VI32 lo0 = hn::Zero(di32), lo1 = hn::Zero(di32), hi0 = hn::Zero(di32), hi1 = hn::Zero(di32);
        for (size_t l = 0; l < 32; l += N) {
          const auto v = hn::LoadU(du8, block.qs + 32 * g + l);
          lo0 = madd(hn::PromoteTo(di16, hn::And(v, mask)), hn::LoadU(di16, x[2 * g].q + l), lo0, lo1);
          hi0 = madd(hn::PromoteTo(di16, hn::ShiftRight<4>(v)), hn::LoadU(di16, x[2 * g + 1].q + l), hi0, hi1);
        }
        sums[2 * g] = hn::Add(lo0, lo1);
        sums[2 * g + 1] = hn::Add(hi0, hi1);
      }
      uint32_t u[3];
      std::memcpy(u, block.scales, sizeof u);
      const uint32_t sc[2] = {u[0] & 0x3f3f3f3fu, (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4)};
      const uint32_t mn[2] = {u[1] & 0x3f3f3f3fu, ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4)};
      const auto scf = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(du8x8, reinterpret_cast<const uint8_t*>(sc))));
      const auto mnf = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(du8x8, reinterpret_cast<const uint8_t*>(mn))));
      const auto total = hn::ConvertTo(
          df, sums_of_8(quad_sums(sums[0], sums[1], sums[2], sums[3]), quad_sums(sums[4], sums[5], sums[6], sums[7])));
      const auto dx = floats_of_8(&x->d, kI16BlockFloats, 8);
      acc = hn::MulAdd(total, hn::Mul(hn::Mul(hn::Set(df, f16_scale(block.d)), scf), dx), acc);
      min_acc = hn::MulAdd(hn::Mul(hn::Set(df, f16_scale(block.dmin)), mnf), floats_of_8(&x->sum, kI16BlockFloats, 8),
                           min_acc);
    }
    return reduce(acc) - reduce(min_acc);
  }
#endif
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
    const BlockQ4_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    for (int64_t g = 0; g < 4; ++g) {
      uint8_t sc_lo, mn_lo, sc_hi, mn_hi;
      unpack_q4_k_scale(block.scales, 2 * g, sc_lo, mn_lo);
      unpack_q4_k_scale(block.scales, 2 * g + 1, sc_hi, mn_hi);
      const I16Block& x_lo = x[2 * g];
      const I16Block& x_hi = x[2 * g + 1];
      VI32 lo0 = hn::Zero(DI32()), lo1 = hn::Zero(DI32()), hi0 = hn::Zero(DI32()), hi1 = hn::Zero(DI32());
      for (size_t l = 0; l < 32; l += N) {
        const auto v = hn::LoadU(du8, block.qs + 32 * g + l);
        lo0 = madd(hn::PromoteTo(di16, hn::And(v, mask)), hn::LoadU(di16, x_lo.q + l), lo0, lo1);
        hi0 = madd(hn::PromoteTo(di16, hn::ShiftRight<4>(v)), hn::LoadU(di16, x_hi.q + l), hi0, hi1);
      }
      acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(lo0, lo1)), hn::Set(df, d * sc_lo * x_lo.d), acc);
      acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(hi0, hi1)), hn::Set(df, d * sc_hi * x_hi.d), acc);
      mins += dmin * (mn_lo * x_lo.sum + mn_hi * x_hi.sum);
    }
  }
  return reduce(acc) - mins;
}

// The low and high 16 bits of a Q5 block's qh word, each broadcast to every i16 lane: one
// dword broadcast and two byte shuffles instead of two scalar splits and word broadcasts.
HWY_INLINE void q5_bit_words(uint32_t qh, VI16& lo, VI16& hi) {
  const DI16 di16;
#if HWY_TARGET == HWY_SCALAR
  lo = hn::Set(di16, static_cast<int16_t>(qh & 0xffffu));
  hi = hn::Set(di16, static_cast<int16_t>(qh >> 16));
#else
  const hn::Repartition<uint32_t, DI16> du32;
  const hn::Repartition<uint16_t, DI16> du16;
  const hn::Repartition<uint8_t, DI16> du8;
  const auto word = hn::BitCast(du8, hn::Set(du32, qh));
  lo = hn::BitCast(di16, hn::TableLookupBytes(word, hn::BitCast(du8, hn::Set(du16, uint16_t{0x0100}))));
  hi = hn::BitCast(di16, hn::TableLookupBytes(word, hn::BitCast(du8, hn::Set(du16, uint16_t{0x0302}))));
#endif
}

// Q5_0: w = dw * (q - 16) with 5-bit q, so a block gives dw * dx * sum(q * qx) - 16 * dw *
// (dx * sum(qx)). The fifth bit of element i is bit i of the block's qh word: it becomes 16
// in lane i by testing the broadcast word against each lane's own bit.
float DotI16Q5_0(const void* row, const I16Block* x, int64_t n) {
  const DI16 di16;
  const DU8 du8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const auto* blocks = static_cast<const BlockQ5_0*>(row);
  alignas(32) static constexpr int16_t kLaneBit[16] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                       256, 512, 1024, 2048, 4096, 8192, 16384, -32768};
  const auto mask = hn::Set(di16, 0x0f);
  const auto sixteen = hn::Set(di16, 16);
  const auto block_sum = [&](int64_t b) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    VI16 lo_bits, hi_bits;
    q5_bit_words(qh, lo_bits, hi_bits);
    VI32 s0 = hn::Zero(DI32()), s1 = hn::Zero(DI32());
    for (size_t j = 0; j < 16; j += N) {
      const auto lane_bit = hn::LoadU(di16, kLaneBit + j);
      const auto q = hn::PromoteTo(di16, hn::LoadU(du8, blocks[b].qs + j));
      const auto h0 = hn::IfThenElseZero(hn::TestBit(lo_bits, lane_bit), sixteen);
      const auto h1 = hn::IfThenElseZero(hn::TestBit(hi_bits, lane_bit), sixteen);
      s0 = madd(hn::Or(hn::And(q, mask), h0), hn::LoadU(di16, x[b].q + j), s0, s1);
      s0 = madd(hn::Or(hn::ShiftRight<4>(q), h1), hn::LoadU(di16, x[b].q + 16 + j), s0, s1);
    }
    return hn::Add(s0, s1);
  };
  const int64_t nb = n / kQK5_0;
  int64_t b = 0;
  auto acc = hn::Zero(df);
  float offset = 0.0f;
#ifdef VQ_I16_BATCHED_SCALES
  auto offsets = hn::Zero(df);
  b = scaled_groups(blocks, sizeof(BlockQ5_0), x, nb, block_sum, acc, &offsets);
  offset = reduce(offsets);
#endif
  for (; b < nb; ++b) {
    const float dw = f16_scale(blocks[b].d);
    acc = hn::MulAdd(hn::ConvertTo(df, block_sum(b)), hn::Set(df, dw * x[b].d), acc);
    offset += dw * x[b].sum;
  }
  return reduce(acc) - 16.0f * offset;
}

// Q5_K: Q4_K's sub-block structure plus the fifth bit j of qh[l] for element l of sub-block j:
// d * sc_j * dx * sum(q * qx) - dmin * mn_j * (dx * sum(qx)). The codes are widened to i16
// before the bit work, where x86 has native shifts (u8 shifts are emulated).
float DotI16Q5_K(const void* row, const I16Block* x, int64_t n) {
  const DI16 di16;
  const DU8 du8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const auto* blocks = static_cast<const BlockQ5_K*>(row);
  const auto mask = hn::Set(di16, 0x0f);
  const auto one = hn::Set(di16, 1), two = hn::Set(di16, 2);
  auto acc = hn::Zero(df);
  float mins = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
    const BlockQ5_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    for (int64_t g = 0; g < 4; ++g) {
      uint8_t sc_lo, mn_lo, sc_hi, mn_hi;
      unpack_q4_k_scale(block.scales, 2 * g, sc_lo, mn_lo);
      unpack_q4_k_scale(block.scales, 2 * g + 1, sc_hi, mn_hi);
      const I16Block& x_lo = x[2 * g];
      const I16Block& x_hi = x[2 * g + 1];
      VI32 lo0 = hn::Zero(DI32()), lo1 = hn::Zero(DI32()), hi0 = hn::Zero(DI32()), hi1 = hn::Zero(DI32());
      for (size_t l = 0; l < 32; l += N) {
        const auto v = hn::PromoteTo(di16, hn::LoadU(du8, block.qs + 32 * g + l));
        const auto h = hn::ShiftRightSame(hn::PromoteTo(di16, hn::LoadU(du8, block.qh + l)), 2 * g);
        const auto c_lo = hn::Or(hn::And(v, mask), hn::ShiftLeft<4>(hn::And(h, one)));
        const auto c_hi = hn::Or(hn::ShiftRight<4>(v), hn::ShiftLeft<3>(hn::And(h, two)));
        lo0 = madd(c_lo, hn::LoadU(di16, x_lo.q + l), lo0, lo1);
        hi0 = madd(c_hi, hn::LoadU(di16, x_hi.q + l), hi0, hi1);
      }
      acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(lo0, lo1)), hn::Set(df, d * sc_lo * x_lo.d), acc);
      acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(hi0, hi1)), hn::Set(df, d * sc_hi * x_hi.d), acc);
      mins += dmin * (mn_lo * x_lo.sum + mn_hi * x_hi.sum);
    }
  }
  return reduce(acc) - mins;
}

// Q5_1: w = d * q + m with Q5_0's 5-bit q: d * dx * sum(q * qx) + m * (dx * sum(qx)).
float DotI16Q5_1(const void* row, const I16Block* x, int64_t n) {
  const DI16 di16;
  const DU8 du8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const auto* blocks = static_cast<const BlockQ5_1*>(row);
  alignas(32) static constexpr int16_t kLaneBit[16] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                       256, 512, 1024, 2048, 4096, 8192, 16384, -32768};
  const auto mask = hn::Set(di16, 0x0f);
  const auto sixteen = hn::Set(di16, 16);
  auto acc = hn::Zero(df);
  float mins = 0.0f;
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    VI16 lo_bits, hi_bits;
    q5_bit_words(qh, lo_bits, hi_bits);
    VI32 s0 = hn::Zero(DI32()), s1 = hn::Zero(DI32());
    for (size_t j = 0; j < 16; j += N) {
      const auto lane_bit = hn::LoadU(di16, kLaneBit + j);
      const auto q = hn::PromoteTo(di16, hn::LoadU(du8, blocks[b].qs + j));
      const auto h0 = hn::IfThenElseZero(hn::TestBit(lo_bits, lane_bit), sixteen);
      const auto h1 = hn::IfThenElseZero(hn::TestBit(hi_bits, lane_bit), sixteen);
      s0 = madd(hn::Or(hn::And(q, mask), h0), hn::LoadU(di16, x[b].q + j), s0, s1);
      s0 = madd(hn::Or(hn::ShiftRight<4>(q), h1), hn::LoadU(di16, x[b].q + 16 + j), s0, s1);
    }
    acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(s0, s1)), hn::Set(df, f16_scale(blocks[b].d) * x[b].d), acc);
    mins += f16_scale(blocks[b].m) * x[b].sum;
  }
  return reduce(acc) + mins;
}

// sum(values * qx) of 32 codebook values with one activation block, as i32 lanes.
HWY_INLINE VI32 i8_block_sum(const int8_t* w, const int16_t* x) {
  const DI16 di16;
  const DI8 di8;
  const size_t N = hn::Lanes(di16);
  VI32 s0 = hn::Zero(DI32()), s1 = hn::Zero(DI32());
  for (size_t j = 0; j < 32; j += N)
    s0 = madd(hn::PromoteTo(di16, hn::LoadU(di8, w + j)), hn::LoadU(di16, x + j), s0, s1);
  return hn::Add(s0, s1);
}

// IQ4_NL: w = d * kIQ4Values[q]: d * dx * sum(value * qx) per block.
float DotI16IQ4_NL(const void* row, const I16Block* x, int64_t n) {
  const DF df;
  const auto* blocks = static_cast<const BlockIQ4_NL*>(row);
  auto acc = hn::Zero(df);
  alignas(16) int8_t values[32];
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    iq4_values(blocks[b].qs, values);
    acc =
        hn::MulAdd(hn::ConvertTo(df, i8_block_sum(values, x[b].q)), hn::Set(df, f16_scale(blocks[b].d) * x[b].d), acc);
  }
  return reduce(acc);
}

// IQ4_XS: sub-block j of a super-block lines up with activation block j:
// d * (ls_j - 32) * dx * sum(value * qx).
float DotI16IQ4_XS(const void* row, const I16Block* x, int64_t n) {
  const DF df;
  const auto* blocks = static_cast<const BlockIQ4_XS*>(row);
  auto acc = hn::Zero(df);
  alignas(16) int8_t values[32];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
    const BlockIQ4_XS& block = blocks[b];
    const float d = f16_scale(block.d);
    for (int64_t j = 0; j < 8; ++j) {
      iq4_values(block.qs + 16 * j, values);
      const float scale = d * static_cast<float>(unpack_iq4_xs_scale(block, j) - 32) * x[j].d;
      acc = hn::MulAdd(hn::ConvertTo(df, i8_block_sum(values, x[j].q)), hn::Set(df, scale), acc);
    }
  }
  return reduce(acc);
}

// Q2_K: element 32s + l of half h is bits 2s of qs[32h + l], i.e. element l of activation
// block 4h + s; its sub-block (16 elements) is 8h + 2s + l/16. The sub-block's 4-bit scale
// and min are folded into the integer products (q * sc <= 45 and mn fit in i16), so each
// activation block needs one conversion for d * dx * sum(q * sc * qx) and one for
// dmin * dx * sum(mn * qx) (I16Block.sum covers 32 elements, the mins change every 16).
float DotI16Q2_K(const void* row, const I16Block* x, int64_t n) {
  const DI16 di16;
  const DU8 du8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const auto* blocks = static_cast<const BlockQ2_K*>(row);
  const auto three = hn::Set(di16, 3);
  auto acc = hn::Zero(df), mins = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
    const BlockQ2_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t s = 0; s < 4; ++s) {
        const I16Block& xb = x[4 * h + s];
        VI32 p0 = hn::Zero(DI32()), p1 = hn::Zero(DI32()), m0 = hn::Zero(DI32()), m1 = hn::Zero(DI32());
        for (size_t l = 0; l < 32; l += N) {
          const auto v = hn::PromoteTo(di16, hn::LoadU(du8, block.qs + 32 * h + l));
          const auto q = hn::And(hn::ShiftRightSame(v, 2 * s), three);
          // N divides 16, so one vector never straddles two sub-blocks.
          const uint8_t sc = block.scales[8 * h + 2 * s + static_cast<int>(l / 16)];
          const auto xv = hn::LoadU(di16, xb.q + l);
          p0 = madd(hn::Mul(q, hn::Set(di16, static_cast<int16_t>(sc & 0x0f))), xv, p0, p1);
          m0 = madd(hn::Set(di16, static_cast<int16_t>(sc >> 4)), xv, m0, m1);
        }
        acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(p0, p1)), hn::Set(df, d * xb.d), acc);
        mins = hn::MulAdd(hn::ConvertTo(df, hn::Add(m0, m1)), hn::Set(df, dmin * xb.d), mins);
      }
    }
  }
  return reduce(hn::Sub(acc, mins));
}

// Q3_K: as Q2_K's layout, with the high bit of element 32k + l (k = 4h + s, the activation
// block) at bit k of hmask[l]: q = low - 4 where that bit is clear. The signed sub-block
// scale sc - 32 is folded into the codes (|q * (sc - 32)| <= 128), so each activation block
// needs one conversion for d * dx * sum(q * (sc - 32) * qx).
float DotI16Q3_K(const void* row, const I16Block* x, int64_t n) {
  const DI16 di16;
  const DU8 du8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const auto* blocks = static_cast<const BlockQ3_K*>(row);
  const auto three = hn::Set(di16, 3), four = hn::Set(di16, 4);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
    const BlockQ3_K& block = blocks[b];
    const float d = f16_scale(block.d);
    int16_t sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<int16_t>(unpack_q3_k_scale(block.scales, j) - 32);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t s = 0; s < 4; ++s) {
        const int k = 4 * h + s;
        const auto bit = hn::Set(di16, static_cast<int16_t>(1 << k));
        VI32 p0 = hn::Zero(DI32()), p1 = hn::Zero(DI32());
        for (size_t l = 0; l < 32; l += N) {
          const auto v = hn::PromoteTo(di16, hn::LoadU(du8, block.qs + 32 * h + l));
          const auto hm = hn::PromoteTo(di16, hn::LoadU(du8, block.hmask + l));
          const auto low = hn::And(hn::ShiftRightSame(v, 2 * s), three);
          const auto q = hn::Sub(low, hn::IfThenZeroElse(hn::TestBit(hm, bit), four));
          const auto scale = hn::Set(di16, sc[8 * h + 2 * s + static_cast<int>(l / 16)]);
          p0 = madd(hn::Mul(q, scale), hn::LoadU(di16, x[k].q + l), p0, p1);
        }
        acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(p0, p1)), hn::Set(df, d * x[k].d), acc);
      }
    }
  }
  return reduce(acc);
}

// Q6_K: element 32k + l of each 128-element half takes its low bits from ql[l + 32(k&1)]
// (nibble k >> 1), its high bits from bits 2k of qh[l], and scale sc[l/16 + 2k]; it is
// element l of activation block 4 * half + k. Codes are recentred to [-32, 31].
float DotI16Q6_K(const void* row, const I16Block* x, int64_t n) {
  const DI16 di16;
  const DU8 du8;
  const DF df;
  const size_t N = hn::Lanes(di16);
  const auto* blocks = static_cast<const BlockQ6_K*>(row);
  const auto low4 = hn::Set(du8, 0x0f), low2 = hn::Set(du8, 0x03);
  const auto bias = hn::Set(di16, 32);
  auto acc = hn::Zero(df);
#ifdef VQ_I16_BATCHED_SCALES
  // Each half of a super-block has eight 16-element scale groups, one vector each: their sums
  // reduced by the transposition (lane j: the group of scale j), the eight int8 scales widened
  // in one step, the activation scales (groups 2k and 2k + 1 share block k) in one vector.
  if constexpr (hn::MaxLanes(DI16()) == 16) {
    const DI32 di32;
    const hn::Rebind<int8_t, DF> di8x8;
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
      const BlockQ6_K& block = blocks[b];
      const auto d = hn::Set(df, f16_scale(block.d));
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = block.ql + 64 * half;
        const uint8_t* qh = block.qh + 32 * half;
        const I16Block* xh = x + 4 * half;
        VI32 sums[8];
        for (int s = 0; s < 2; ++s) {
          const size_t l = 16 * static_cast<size_t>(s);
          const auto a = hn::LoadU(du8, ql + l), c = hn::LoadU(du8, ql + 32 + l), h = hn::LoadU(du8, qh + l);
          const hn::Vec<DU8> q[4] = {
              hn::Or(hn::And(a, low4), hn::ShiftLeft<4>(hn::And(h, low2))),
              hn::Or(hn::And(c, low4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), low2))),
              hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), low2))),
              hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::ShiftRight<6>(h)))};
          for (int k = 0; k < 4; ++k) {
            VI32 s0 = hn::Zero(di32), s1 = hn::Zero(di32);
            s0 = madd(hn::Sub(hn::PromoteTo(di16, q[k]), bias), hn::LoadU(di16, xh[k].q + l), s0, s1);
            sums[s + 2 * k] = hn::Add(s0, s1);
          }
        }
        const auto total = hn::ConvertTo(df, sums_of_8(quad_sums(sums[0], sums[1], sums[2], sums[3]),
                                                       quad_sums(sums[4], sums[5], sums[6], sums[7])));
        const auto scf = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8x8, block.scales + 8 * half)));
        acc = hn::MulAdd(total,
                         hn::Mul(hn::Mul(d, scf), hn::Vec<DF>{_mm256_setr_ps(xh[0].d, xh[0].d, xh[1].d, xh[1].d,
                                                                             xh[2].d, xh[2].d, xh[3].d, xh[3].d)}),
                         acc);
      }
    }
    return reduce(acc);
  }
#endif
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K / kI16Block) {
    const BlockQ6_K& block = blocks[b];
    const float d = f16_scale(block.d);
    for (int64_t half = 0; half < 2; ++half) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      const int8_t* sc = block.scales + 8 * half;
      const I16Block* xh = x + 4 * half;
      for (size_t l = 0; l < 32; l += N) {
        const auto a = hn::LoadU(du8, ql + l), c = hn::LoadU(du8, ql + 32 + l), h = hn::LoadU(du8, qh + l);
        const hn::Vec<DU8> q[4] = {hn::Or(hn::And(a, low4), hn::ShiftLeft<4>(hn::And(h, low2))),
                                   hn::Or(hn::And(c, low4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), low2))),
                                   hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), low2))),
                                   hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::ShiftRight<6>(h)))};
        // N divides 16, so one vector never straddles two scale groups.
        const int s = static_cast<int>(l / 16);
        for (int k = 0; k < 4; ++k) {
          VI32 s0 = hn::Zero(DI32()), s1 = hn::Zero(DI32());
          s0 = madd(hn::Sub(hn::PromoteTo(di16, q[k]), bias), hn::LoadU(di16, xh[k].q + l), s0, s1);
          acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(s0, s1)), hn::Set(df, d * sc[s + 2 * k] * xh[k].d), acc);
        }
      }
    }
  }
  return reduce(acc);
}

// How far ahead of the row being multiplied the decode matvec asks for weight bytes. A decode
// step streams every weight once from DRAM; the hardware streamers restart at each 4 KiB page
// and, between bursts of compute on short rows (SmolLM2: 360-byte Q4_1 rows), leave the core
// waiting. Asking for the bytes this far ahead keeps ~64 lines in flight per core.
constexpr size_t kWeightPrefetchBytes = 4096;

// Hints for the row_bytes that lie kWeightPrefetchBytes past the start of `row`: rows are
// contiguous, so one call per row walks the matrix as a single stream that far ahead. A
// prefetch never faults, so hinting past the last row is harmless (the address is formed as an
// integer: it may point past the mapping).
HWY_INLINE void prefetch_ahead(const std::byte* row, size_t row_bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(row) + kWeightPrefetchBytes;
  for (size_t b = 0; b < row_bytes; b += 64) hwy::Prefetch(reinterpret_cast<const char*>(start + b));
}

// y[r] = dot(row r, x) for n_rows rows row_bytes apart: one dispatch per range of rows
// instead of one per row (decode matvecs are hundreds of thousands of short rows per token).
template <float (*Dot)(const void*, const I16Block*, int64_t)>
HWY_INLINE void rows_with(const std::byte* rows, size_t row_bytes, int64_t n_rows, const I16Block* x, int64_t n,
                          float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::byte* row = rows + static_cast<size_t>(r) * row_bytes;
    prefetch_ahead(row, row_bytes);
    y[r] = Dot(row, x, n);
  }
}

#ifdef VQ_I16_BATCHED_SCALES
// Activation blocks with their scales and sums copied out contiguously, once for a range of
// rows (the per-row kernels otherwise gather them per group of eight blocks per row).
// Rows wider than kMaxBlocks keep the gathering route.
class ContiguousScales {
 public:
  static constexpr int64_t kMaxBlocks = 1024;
  ContiguousScales(const I16Block* x, int64_t nb) : x_(x), fits_(nb <= kMaxBlocks) {
    if (!fits_) return;
    for (int64_t k = 0; k < nb; ++k) {
      d_[k] = x[k].d;
      sum_[k] = x[k].sum;
    }
    for (int64_t k = nb; k < nb + 8; ++k) d_[k] = sum_[k] = 0.0f;
  }
  ActivationScales scales() const { return fits_ ? ActivationScales{x_, d_, sum_} : ActivationScales{x_}; }

 private:
  const I16Block* x_;
  bool fits_;
  float d_[kMaxBlocks + 8];
  float sum_[kMaxBlocks + 8];
};

// y[r] = Dot(row r) for a format whose kernel takes ActivationScales (block size 32).
template <class Block, float (*Dot)(const Block*, const ActivationScales&, int64_t)>
HWY_INLINE void rows_with_scales(const std::byte* rows, size_t row_bytes, int64_t n_rows, const I16Block* x, int64_t n,
                                 float* y) {
  const ContiguousScales contiguous(x, n / kI16Block);
  const ActivationScales xs = contiguous.scales();
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::byte* row = rows + static_cast<size_t>(r) * row_bytes;
    prefetch_ahead(row, row_bytes);
    y[r] = Dot(reinterpret_cast<const Block*>(row), xs, n / kI16Block);
  }
}
#endif

void DotI16Rows(GgmlType type, const void* rows, size_t row_bytes, int64_t n_rows, const I16Block* x, int64_t n,
                float* y) {
  const auto* p = static_cast<const std::byte*>(rows);
  switch (type) {
    case GgmlType::Q4_0:
#ifdef VQ_I16_BATCHED_SCALES
      return rows_with_scales<BlockQ4_0, q4_0_dot>(p, row_bytes, n_rows, x, n, y);
#else
      return rows_with<DotI16Q4_0>(p, row_bytes, n_rows, x, n, y);
#endif
    case GgmlType::Q4_1:
#ifdef VQ_I16_BATCHED_SCALES
      return rows_with_scales<BlockQ4_1, q4_1_batched>(p, row_bytes, n_rows, x, n, y);
#else
      return rows_with<DotI16Q4_1>(p, row_bytes, n_rows, x, n, y);
#endif
    case GgmlType::Q8_0:
#ifdef VQ_I16_BATCHED_SCALES
      return rows_with_scales<BlockQ8_0, q8_0_dot>(p, row_bytes, n_rows, x, n, y);
#else
      return rows_with<DotI16Q8_0>(p, row_bytes, n_rows, x, n, y);
#endif
    case GgmlType::Q4_K:
      return rows_with<DotI16Q4_K>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::Q6_K:
      return rows_with<DotI16Q6_K>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::Q5_0:
      return rows_with<DotI16Q5_0>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::Q5_K:
      return rows_with<DotI16Q5_K>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::Q5_1:
      return rows_with<DotI16Q5_1>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::IQ4_NL:
      return rows_with<DotI16IQ4_NL>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::IQ4_XS:
      return rows_with<DotI16IQ4_XS>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::Q2_K:
      return rows_with<DotI16Q2_K>(p, row_bytes, n_rows, x, n, y);
    case GgmlType::Q3_K:
      return rows_with<DotI16Q3_K>(p, row_bytes, n_rows, x, n, y);
    default:
      return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lm::kernels::simd {

HWY_EXPORT(QuantizeI16);
HWY_EXPORT(DotI16Q4_0);
HWY_EXPORT(DotI16Q4_1);
HWY_EXPORT(DotI16Q8_0);
HWY_EXPORT(DotI16Q4_K);
HWY_EXPORT(DotI16Q6_K);
HWY_EXPORT(DotI16Q5_0);
HWY_EXPORT(DotI16Q5_K);
HWY_EXPORT(DotI16Q5_1);
HWY_EXPORT(DotI16IQ4_NL);
HWY_EXPORT(DotI16IQ4_XS);
HWY_EXPORT(DotI16Q2_K);
HWY_EXPORT(DotI16Q3_K);
HWY_EXPORT(DotI16Rows);

void quantize_i16(const float* x, int64_t n, I16Block* out) { HWY_DYNAMIC_DISPATCH(QuantizeI16)(x, n, out); }
float dot_i16_q4_0(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q4_0)(row, x, n);
}
float dot_i16_q4_1(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q4_1)(row, x, n);
}
float dot_i16_q8_0(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q8_0)(row, x, n);
}
float dot_i16_q4_k(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q4_K)(row, x, n);
}
float dot_i16_q6_k(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q6_K)(row, x, n);
}
float dot_i16_q5_0(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q5_0)(row, x, n);
}
float dot_i16_q5_k(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q5_K)(row, x, n);
}
float dot_i16_q5_1(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q5_1)(row, x, n);
}
float dot_i16_iq4_nl(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16IQ4_NL)(row, x, n);
}
float dot_i16_iq4_xs(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16IQ4_XS)(row, x, n);
}
float dot_i16_q2_k(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q2_K)(row, x, n);
}
float dot_i16_q3_k(const void* row, const I16Block* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotI16Q3_K)(row, x, n);
}
void dot_i16_rows(GgmlType type, const void* rows, size_t row_bytes, int64_t n_rows, const I16Block* x, int64_t n,
                  float* y) {
  HWY_DYNAMIC_DISPATCH(DotI16Rows)(type, rows, row_bytes, n_rows, x, n, y);
}

}  // namespace lm::kernels::simd
#endif  // HWY_ONCE
