// Highway kernel for row_logits.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/row_logits.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "lm/kernels/dot_f32-inl.h"

#include <algorithm>
#include <cmath>

#include "lm/kernels/simd_dot.h"
#include "veloxquant/eviction/row_logits.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {

// The widest query group one pass over the rows serves (4 x 2 accumulators and the queries of a
// 64-wide head fit AVX-512's 32 registers).
constexpr int kMaxGroup = 4;

// kQ queries over every row. kDim > 0: the width known here (the common head dimensions), so each
// dot's loops unroll and the queries, copied to this frame, can stay in registers; 0: `dim` at run
// time. The same operations either way.
template <int64_t kDim, int kQ>
void RowLogitsGroup(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                    float scale, float* out, int64_t stride, float* maxima) {
  const int64_t d = kDim > 0 ? kDim : dim;
  alignas(64) float local[kDim > 0 ? kQ * kDim : 1];
  const float* x[kQ];
  for (int q = 0; q < kQ; ++q) {
    if constexpr (kDim > 0) {
      std::copy_n(queries + q * kDim, kDim, local + q * kDim);
      x[q] = local + q * kDim;
    } else {
      x[q] = queries + q * dim;
    }
  }
  // std::max keeps the running maximum when the new logit is NaN, as the scalar loop did.
  float mx[kQ];
  std::fill_n(mx, kQ, -INFINITY);
  float sums[kQ];
  for (int64_t j = 0; j < count; ++j) {
    const float* key = keys + static_cast<int64_t>(rows ? rows[j] : j) * d;
    lm::kernels::simd::HWY_NAMESPACE::dot_f32_multi<kQ>(key, x, d, sums);
    for (int q = 0; q < kQ; ++q) {
      const float v = sums[q] * scale;
      out[q * stride + j] = v;
      mx[q] = std::max(mx[q], v);
    }
  }
  std::copy_n(mx, kQ, maxima);
}

template <int64_t kDim>
void RowLogitsFixed(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                    int64_t n_queries, float scale, float* out, int64_t stride, float* maxima) {
  for (int64_t q = 0; q < n_queries; q += kMaxGroup) {
    const float* group = queries + q * dim;
    float* group_out = out + q * stride;
    switch (std::min<int64_t>(kMaxGroup, n_queries - q)) {
      case 4:
        RowLogitsGroup<kDim, 4>(keys, rows, count, dim, group, scale, group_out, stride, maxima + q);
        break;
      case 3:
        RowLogitsGroup<kDim, 3>(keys, rows, count, dim, group, scale, group_out, stride, maxima + q);
        break;
      case 2:
        RowLogitsGroup<kDim, 2>(keys, rows, count, dim, group, scale, group_out, stride, maxima + q);
        break;
      default:
        RowLogitsGroup<kDim, 1>(keys, rows, count, dim, group, scale, group_out, stride, maxima + q);
        break;
    }
  }
}

void ScaledRowLogitsImpl(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                         int64_t n_queries, float scale, float* out, int64_t stride, float* maxima) {
  if (dim == 64) return RowLogitsFixed<64>(keys, rows, count, dim, queries, n_queries, scale, out, stride, maxima);
  if (dim == 128) return RowLogitsFixed<128>(keys, rows, count, dim, queries, n_queries, scale, out, stride, maxima);
  RowLogitsFixed<0>(keys, rows, count, dim, queries, n_queries, scale, out, stride, maxima);
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(ScaledRowLogitsImpl);

void scaled_row_logits(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                       int64_t n_queries, float scale, float* out, int64_t stride, float* maxima) {
  HWY_DYNAMIC_DISPATCH(ScaledRowLogitsImpl)(keys, rows, count, dim, queries, n_queries, scale, out, stride, maxima);
}

namespace scalar {
void scaled_row_logits(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                       int64_t n_queries, float scale, float* out, int64_t stride, float* maxima) {
  for (int64_t q = 0; q < n_queries; ++q) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < count; ++j) {
      const float* key = keys + static_cast<int64_t>(rows ? rows[j] : j) * dim;
      const float x = lm::kernels::simd::dot_f32(key, queries + q * dim, dim) * scale;
      out[q * stride + j] = x;
      mx = std::max(mx, x);
    }
    maxima[q] = mx;
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
