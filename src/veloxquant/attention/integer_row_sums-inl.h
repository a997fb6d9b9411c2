// Per-target helpers (Highway -inl header: included once per SIMD target from inside a
// foreach_target translation unit) shared by the integer scoring loops: four rows' 32-bit sums
// reduced and finished into f32 scores, and a barrier that keeps a row's sums from being
// regrouped with the next row's.
#if defined(VELOXQUANT_ATTENTION_INTEGER_ROW_SUMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VELOXQUANT_ATTENTION_INTEGER_ROW_SUMS_INL_H_
#undef VELOXQUANT_ATTENTION_INTEGER_ROW_SUMS_INL_H_
#else
#define VELOXQUANT_ATTENTION_INTEGER_ROW_SUMS_INL_H_
#endif

#include "hwy/highway.h"

// An including kernel file whose row sums need more than the target's instructions (VNNI on
// AVX3_DL, codebook_key_scores.cpp) defines this per target before the include: the row loop
// below inlines its row_sums and so needs the same target attribute.
#ifndef VQ_ROW_SUMS_EXTRA_TARGET
#define VQ_ROW_SUMS_EXTRA_TARGET
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// The sums of four 8-lane vectors (i32 or f32) side by side in one vector of four lanes
// (256-bit D only): within each 128-bit block pairs, then quads of the four side by side; then
// the two blocks added — nine shuffles and adds instead of four full horizontal sums. For f32
// the order is fixed: lane sum of a = ((a0 + a2) + (a1 + a3)) + ((a4 + a6) + (a5 + a7)).
// Its first step, on two of the four vectors: a row pair's sums in one vector, so a kernel can
// fold each pair as soon as both rows are done (fewer vectors live across four rows).
template <class D, class V>
HWY_INLINE V sums_of_pair(D d32, V a, V b) {
  return hn::Add(hn::InterleaveLower(d32, a, b), hn::InterleaveUpper(d32, a, b));
}

// The rest, from two pairs (sums_of_4(a, b, c, e) == sums_of_pairs(sums_of_pair(a, b), sums_of_pair(c, e))).
template <class D, class V>
HWY_INLINE hn::Vec<hn::Half<D>> sums_of_pairs(D d32, V ab, V ce) {
  static_assert(hn::MaxLanes(D()) == 8, "256-bit vectors of 32-bit lanes");
  const hn::RepartitionToWide<D> d64;
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const V s = hn::Add(hn::BitCast(d32, hn::InterleaveLower(d64, ab64, ce64)),
                      hn::BitCast(d32, hn::InterleaveUpper(d64, ab64, ce64)));
  const hn::Half<D> dh;
  return hn::Add(hn::LowerHalf(dh, s), hn::UpperHalf(dh, s));
}

template <class D, class V>
HWY_INLINE hn::Vec<hn::Half<D>> sums_of_4(D d32, V a, V b, V c, V e) {
  static_assert(hn::MaxLanes(D()) == 8, "256-bit vectors of 32-bit lanes");
  const hn::RepartitionToWide<D> d64;
  const V ab = sums_of_pair(d32, a, b);
  const V ce = sums_of_pair(d32, c, e);
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const V s = hn::Add(hn::BitCast(d32, hn::InterleaveLower(d64, ab64, ce64)),
                      hn::BitCast(d32, hn::InterleaveUpper(d64, ab64, ce64)));
  const hn::Half<D> dh;
  return hn::Add(hn::LowerHalf(dh, s), hn::UpperHalf(dh, s));
}

// The same for four 16-lane (512-bit) integer vectors: after the in-block steps each 128-bit
// block holds its part of the four sums, and the four blocks are added (integers only: the
// order of the adds differs from sums_of_4's, which is exact for integers alone).
template <class D, class V>
HWY_INLINE hn::Vec<hn::Half<hn::Half<D>>> integer_sums_of_4_x16(D d32, V a, V b, V c, V e) {
  static_assert(hn::MaxLanes(D()) == 16 && !hwy::IsFloat<hn::TFromD<D>>(), "512-bit vectors of integer lanes");
  const hn::RepartitionToWide<D> d64;
  const auto ab64 = hn::BitCast(d64, sums_of_pair(d32, a, b)), ce64 = hn::BitCast(d64, sums_of_pair(d32, c, e));
  const V s = hn::Add(hn::BitCast(d32, hn::InterleaveLower(d64, ab64, ce64)),
                      hn::BitCast(d32, hn::InterleaveUpper(d64, ab64, ce64)));
  const hn::Half<D> dh;
  const hn::Half<decltype(dh)> dq;
  const auto halves = hn::Add(hn::LowerHalf(dh, s), hn::UpperHalf(dh, s));
  return hn::Add(hn::LowerHalf(dq, halves), hn::UpperHalf(dq, halves));
}

// Scores of four rows for one query from their integer sums (each an i32 vector whose lanes
// add up to the row's sum): out[t] = step * float(sum_t) + bias, as the scalar reference.
template <class D, class V>
HWY_INLINE void finish_4(D d32, V a, V b, V c, V e, float step, float bias, float* out) {
  if constexpr (hn::MaxLanes(d32) == 8) {
    // The four scores finished in one vector.
    const hn::Half<D> dh;
    const hn::Rebind<float, decltype(dh)> df;
    const auto totals = hn::ConvertTo(df, sums_of_4(d32, a, b, c, e));
    hn::StoreU(hn::Add(hn::Mul(totals, hn::Set(df, step)), hn::Set(df, bias)), df, out);
  } else if constexpr (hn::MaxLanes(d32) == 16 && !hwy::IsFloat<hn::TFromD<D>>()) {
    const hn::Half<hn::Half<D>> dq;
    const hn::Rebind<float, decltype(dq)> df;
    const auto totals = hn::ConvertTo(df, integer_sums_of_4_x16(d32, a, b, c, e));
    hn::StoreU(hn::Add(hn::Mul(totals, hn::Set(df, step)), hn::Set(df, bias)), df, out);
  } else {
    const V rows[4] = {a, b, c, e};
    for (int t = 0; t < 4; ++t) out[t] = step * static_cast<float>(hn::GetLane(hn::SumOfLanes(d32, rows[t]))) + bias;
  }
}

// Ends a row's sums here. Integer adds reassociate freely, and GCC otherwise regroups the
// multiply-adds of all four rows of a block into one tree, keeping every product alive at
// once and spilling them to the stack; an empty asm that "changes" each sum keeps a row's
// products summed before the next row starts. GCC only: clang (which defines __GNUC__ too)
// refuses the tie when the vector lives in memory ("inline asm not supported yet: don't know how
// to handle tied indirect register inputs"; clang 14 at -O0 and -O1, scripts/fuzz.sh's build of
// codebook_key_scores.cpp and integer_key_scores.cpp); the asm is a scheduling hint only, so
// without it the sums are the same.
template <int NQ, class V>
HWY_INLINE void keep_in_registers(V* sums) {
#if HWY_ARCH_X86 && defined(__GNUC__) && !defined(__clang__)
  for (int r = 0; r < NQ; ++r) asm("" : "+v"(sums[r].raw));
#else
  (void)sums;
#endif
}

// scores[r * ld + j] = step[r] * float(sum of row j for query r) + bias[r] (bias nullptr: 0) for
// rows j < n_rows, NQ queries; row_sums(j, sums) fills the NQ sum vectors of row j. Four rows
// at a time (one reduction for the four), then the rest one by one.
template <int NQ, class D32, class RowSums>
VQ_ROW_SUMS_EXTRA_TARGET HWY_INLINE void score_rows_in_fours(D32 d32, int64_t n_rows, const RowSums& row_sums,
                                                             const float* step, const float* bias, float* scores,
                                                             int64_t ld) {
  using V32 = hn::Vec<D32>;
  const auto bias_of = [&](int r) { return bias != nullptr ? bias[r] : 0.0f; };
  int64_t j = 0;
  for (; j + 4 <= n_rows; j += 4) {
    V32 s0[NQ], s1[NQ], s2[NQ], s3[NQ];
    row_sums(j, s0);
    keep_in_registers<NQ>(s0);
    row_sums(j + 1, s1);
    keep_in_registers<NQ>(s1);
    row_sums(j + 2, s2);
    keep_in_registers<NQ>(s2);
    row_sums(j + 3, s3);
    for (int r = 0; r < NQ; ++r) finish_4(d32, s0[r], s1[r], s2[r], s3[r], step[r], bias_of(r), scores + r * ld + j);
  }
  for (; j < n_rows; ++j) {
    V32 s[NQ];
    row_sums(j, s);
    for (int r = 0; r < NQ; ++r) {
      scores[r * ld + j] = step[r] * static_cast<float>(hn::GetLane(hn::SumOfLanes(d32, s[r]))) + bias_of(r);
    }
  }
}

#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
