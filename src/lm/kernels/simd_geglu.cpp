// GeGLU (Gemma's FFN activation) with Highway: the scalar loop called libm's tanhf (and its
// expm1f) once per hidden unit, 2,048 x 18 layers per token on Gemma 3 270M — a per-call
// cost far above a vector polynomial. Highway's contrib Tanh is accurate to a few ulp, so
// the result is within a few ulp of geglu_reference (tests/lm/kernels_test.cpp bounds it),
// not bit-identical. Highway's foreach_target re-includes this file once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/simd_geglu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>

#include "lm/kernels/elementwise.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void GegluRows(float* gate, const float* up, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  const auto k0 = hn::Set(d, 0.7978845608028654f), k1 = hn::Set(d, 0.044715f);
  const auto gelu_times = [&](hn::Vec<decltype(d)> x, hn::Vec<decltype(d)> u) {
    // Same operation order as gelu_tanh: sqrt(2/pi) * (x + 0.044715 * x^3).
    const auto inner = hn::Mul(k0, hn::Add(x, hn::Mul(hn::Mul(hn::Mul(k1, x), x), x)));
    return hn::Mul(hn::Mul(hn::Mul(half, x), hn::Add(one, hn::Tanh(d, inner))), u);
  };
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(gelu_times(hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, gate + i);
  }
  if (i < n) {
    // The tail through one zero-padded vector (this Highway has no LoadN/StoreN).
    HWY_ALIGN float g[HWY_MAX_BYTES / sizeof(float)] = {}, u[HWY_MAX_BYTES / sizeof(float)] = {};
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    hn::Store(gelu_times(hn::Load(d, g), hn::Load(d, u)), d, g);
    std::copy(g, g + (n - i), gate + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lm::kernels {
namespace simd {
HWY_EXPORT(GegluRows);

// The dispatch sits in the namespace of its export: with static dispatch only (scripts/lint.sh
// parses kernels with HWY_COMPILE_ONLY_STATIC) HWY_DYNAMIC_DISPATCH(simd::GegluRows) becomes
// N_<target>::simd::GegluRows, which does not exist; unqualified, from here, it resolves.
void geglu_rows(float* gate, const float* up, int64_t n) { HWY_DYNAMIC_DISPATCH(GegluRows)(gate, up, n); }
}  // namespace simd

void geglu(float* gate, const float* up, int64_t n) {
  if (n <= 0) return;
  simd::geglu_rows(gate, up, n);
}

}  // namespace lm::kernels
#endif  // HWY_ONCE
