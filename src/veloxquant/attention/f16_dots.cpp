// Highway kernel for f16_dots.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/f16_dots.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/f16_dots.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

#include <algorithm>
#include <cmath>

#include "base/half.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 8 lanes of 32 bits (sums_of_4): 256-bit targets and wider; narrower ones run the reference.
#if HWY_TARGET != HWY_SCALAR && HWY_MAX_BYTES >= 32
#define VELOXQUANT_F16_DOTS_SIMD 1
using DF = hn::CappedTag<float, 8>;

// R factor rows x NQ vectors: R * NQ <= 12 accumulators.
template <int R, int NQ>
void dots_block(const uint16_t* a, int64_t a_stride, const float* x, int64_t x_stride, int64_t n, float* out,
                int64_t rank) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const hn::Half<DF> dhalf;
  using V = hn::Vec<DF>;
  V acc[R * NQ];
  for (int k = 0; k < R * NQ; ++k) acc[k] = hn::Zero(df);
  const int64_t whole = n / 8 * 8;
  for (int64_t c = 0; c < whole; c += 8) {
    V xs[NQ];
    for (int r = 0; r < NQ; ++r) xs[r] = hn::LoadU(df, x + r * x_stride + c);
    for (int i = 0; i < R; ++i) {
      const V f = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(a + i * a_stride + c)));
      for (int r = 0; r < NQ; ++r) acc[i * NQ + r] = hn::MulAdd(f, xs[r], acc[i * NQ + r]);
    }
  }
  // Reduced four accumulators at a time; lane k of a sums_of_4 result is accumulator k's sum.
  HWY_ALIGN float sums[16];
  const V zero = hn::Zero(df);
  for (int k = 0; k < R * NQ; k += 4) {
    const auto get = [&](int m) { return m < R * NQ ? acc[m] : zero; };
    hn::Store(sums_of_4(df, get(k), get(k + 1), get(k + 2), get(k + 3)), dhalf, sums + k);
  }
  for (int i = 0; i < R; ++i) {
    for (int r = 0; r < NQ; ++r) {
      float s = sums[i * NQ + r];
      for (int64_t c = whole; c < n; ++c) s += base::f16_to_f32(a[i * a_stride + c]) * x[r * x_stride + c];
      out[r * rank + i] = s;
    }
  }
}

template <int NQ>
void dots_queries(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n,
                  float* out) {
  // Factor rows four at a time (three with three queries: 9 accumulators), then the rest.
  constexpr int kRows = NQ == 3 ? 3 : 4;
  int64_t i = 0;
  for (; i + kRows <= rank; i += kRows)
    dots_block<kRows, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
  if (i + 2 <= rank) {  // GEAR's usual rank 2
    dots_block<2, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
    i += 2;
  }
  for (; i < rank; ++i) dots_block<1, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
}
#endif

void F16DotsImpl(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
                 int64_t n, float* out) {
#ifdef VELOXQUANT_F16_DOTS_SIMD
  int64_t r = 0;
  for (; r + 3 <= n_x; r += 3) dots_queries<3>(a, a_stride, rank, x + r * x_stride, x_stride, n, out + r * rank);
  for (; r < n_x; ++r) dots_queries<1>(a, a_stride, rank, x + r * x_stride, x_stride, n, out + r * rank);
#else
  scalar::f16_dots(a, a_stride, rank, x, x_stride, n_x, n, out);
#endif
}
#undef VELOXQUANT_F16_DOTS_SIMD

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(F16DotsImpl);

void f16_dots(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
              int64_t n, float* out) {
  if (rank <= 0 || n_x <= 0) return;
  HWY_DYNAMIC_DISPATCH(F16DotsImpl)(a, a_stride, rank, x, x_stride, n_x, n, out);
}

namespace scalar {
void f16_dots(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
              int64_t n, float* out) {
  const int64_t whole = n / 8 * 8;
  for (int64_t r = 0; r < n_x; ++r) {
    for (int64_t i = 0; i < rank; ++i) {
      float lane[8] = {};
      for (int64_t c = 0; c < whole; ++c) {
        lane[c % 8] = std::fma(base::f16_to_f32(a[i * a_stride + c]), x[r * x_stride + c], lane[c % 8]);
      }
      float s = ((lane[0] + lane[2]) + (lane[1] + lane[3])) + ((lane[4] + lane[6]) + (lane[5] + lane[7]));
      for (int64_t c = whole; c < n; ++c) s += base::f16_to_f32(a[i * a_stride + c]) * x[r * x_stride + c];
      out[r * rank + i] = s;
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
