// Per-target f32 dot product (Highway -inl header: included once per SIMD target from inside a
// foreach_target translation unit). simd_dot.cpp's dot_f32 is this function; the eviction
// scorers' row logits (veloxquant/eviction/row_logits.cpp) inline it into their loop over rows,
// so each of their dots is dot_f32's number bit for bit (the kept rows depend on it) without a
// dispatched call per row. Two accumulators over alternating vectors, one vector more, the
// lanes summed by SumOfLanes, the tail element by element: change the order here and both move
// together.
#if defined(LM_KERNELS_DOT_F32_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LM_KERNELS_DOT_F32_INL_H_
#undef LM_KERNELS_DOT_F32_INL_H_
#else
#define LM_KERNELS_DOT_F32_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd::HWY_NAMESPACE {

// The f32 lanes of dot_f32: at most 16 (a whole number of vectors per 16- or 32-element block).
using DotF32Tag = hwy::HWY_NAMESPACE::CappedTag<float, 16>;

HWY_INLINE float dot_f32_inline(const float* w, const float* x, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const DotF32Tag df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::MulAdd(hn::LoadU(df, w + i), hn::LoadU(df, x + i), a0);
    a1 = hn::MulAdd(hn::LoadU(df, w + i + N), hn::LoadU(df, x + i + N), a1);
  }
  for (; i + N <= n; i += N) a0 = hn::MulAdd(hn::LoadU(df, w + i), hn::LoadU(df, x + i), a0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

// dot_f32_inline of kQ vectors x[q] against one w, w loaded once for all of them: sums[q] is
// dot_f32_inline(w, x[q], n) bit for bit (each q's accumulators take the same steps).
template <int kQ>
HWY_INLINE void dot_f32_multi(const float* w, const float* const* x, int64_t n, float* sums) {
  namespace hn = hwy::HWY_NAMESPACE;
  const DotF32Tag df;
  using V = hn::Vec<DotF32Tag>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  V a0[kQ], a1[kQ];
  for (int q = 0; q < kQ; ++q) a0[q] = a1[q] = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const V w0 = hn::LoadU(df, w + i), w1 = hn::LoadU(df, w + i + N);
    for (int q = 0; q < kQ; ++q) {
      a0[q] = hn::MulAdd(w0, hn::LoadU(df, x[q] + i), a0[q]);
      a1[q] = hn::MulAdd(w1, hn::LoadU(df, x[q] + i + N), a1[q]);
    }
  }
  for (; i + N <= n; i += N) {
    const V w0 = hn::LoadU(df, w + i);
    for (int q = 0; q < kQ; ++q) a0[q] = hn::MulAdd(w0, hn::LoadU(df, x[q] + i), a0[q]);
  }
  for (int q = 0; q < kQ; ++q) sums[q] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[q], a1[q])));
  for (; i < n; ++i) {
    for (int q = 0; q < kQ; ++q) sums[q] += w[i] * x[q][i];
  }
}

}  // namespace lm::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LM_KERNELS_DOT_F32_INL_H_
