// Highway kernel for skvq_clip_search.h, compiled once per target and dispatched at run time.
// Built with -ffp-contract=off (src/veloxquant/CMakeLists.txt): the reconstruction is a multiply
// then an add in f32, rounded apart, as decode_code's baseline loop.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/skvq_clip_search.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "base/half.h"
#include "veloxquant/caches/skvq_clip_search.h"
#include "veloxquant/caches/skvq_codes.h"

#include <algorithm>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::skvq::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
GroupParams16 SearchImpl(const float* x, int n, int bits, double alpha_max, uint8_t* codes) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // one f32 per f64 lane: a candidate per lane
  const int lanes = static_cast<int>(hn::Lanes(dd));
  const int blocks = (kClipCandidates + lanes - 1) / lanes;  // 2 (AVX-512), 3 (AVX2), 6 (SSE)
  constexpr int kMaxBlocks = 6;                              // SSE's 2 f64 lanes
  constexpr int kPadded = 16;                                // candidate slots: blocks * lanes is 16, 12 or 12
  if (n > kMaxSimdGroup || blocks > kMaxBlocks || blocks * lanes > kPadded) {
    return scalar::search_clip_group(x, n, bits, alpha_max, codes);
  }
  const float levels = static_cast<float>((1u << bits) - 1u);
  float lo = x[0], hi = x[0];  // as clip_group finds them (the same for every candidate)
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  // Each candidate's stored parameters and their f32 values; lanes past the last candidate get
  // (scale 1, min 0) and are never chosen.
  GroupParams16 params[kClipCandidates];
  HWY_ALIGN float mins[kPadded], scales[kPadded];
  std::fill(mins, mins + kPadded, 0.0f);
  std::fill(scales, scales + kPadded, 1.0f);
  for (int k = 0; k < kClipCandidates; ++k) {
    params[k] = clip_params(lo, hi, bits, clip_candidate(alpha_max, k));
    mins[k] = base::f16_to_f32(params[k].min_f16);
    scales[k] = base::f16_to_f32(params[k].scale_f16);
  }
  using VF = hn::Vec<decltype(df)>;
  using VD = hn::Vec<decltype(dd)>;
  VF vmin[kMaxBlocks], vscale[kMaxBlocks];
  VD err[kMaxBlocks];
  for (int64_t b = 0; b < blocks; ++b) {
    vmin[b] = hn::LoadU(df, mins + b * lanes);
    vscale[b] = hn::LoadU(df, scales + b * lanes);
    err[b] = hn::Zero(dd);
  }
  const VF zero = hn::Zero(df), top = hn::Set(df, levels);
  // Every candidate's codes, value-major: q[i * stride + k].
  const int64_t stride = int64_t{blocks} * lanes;
  HWY_ALIGN float q[kMaxSimdGroup * kPadded];
  for (int64_t i = 0; i < n; ++i) {
    const VF xv = hn::Set(df, x[i]);
    const VD xd = hn::Set(dd, static_cast<double>(x[i]));
    for (int64_t b = 0; b < blocks; ++b) {
      VF code = hn::Round(hn::Div(hn::Sub(xv, vmin[b]), vscale[b]));  // half to even, as nearbyint
      code = hn::Min(hn::Max(code, zero), top);
      hn::StoreU(code, df, q + i * stride + b * lanes);
      const VF rebuilt = hn::Add(hn::Mul(code, vscale[b]), vmin[b]);
      const VD e = hn::Sub(hn::PromoteTo(dd, rebuilt), xd);
      err[b] = hn::Add(err[b], hn::Mul(e, e));
    }
  }
  HWY_ALIGN double errors[kPadded];
  for (int64_t b = 0; b < blocks; ++b) hn::Store(err[b], dd, errors + b * lanes);
  int best = 0;
  for (int k = 1; k < kClipCandidates; ++k) {
    if (errors[k] < errors[best]) best = k;  // strictly less: ties keep the larger factor
  }
  for (int i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(q[i * stride + best]);
  return params[best];
}
#else
GroupParams16 SearchImpl(const float* x, int n, int bits, double alpha_max, uint8_t* codes) {
  return scalar::search_clip_group(x, n, bits, alpha_max, codes);
}
#endif

}  // namespace veloxquant::skvq::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::skvq {
HWY_EXPORT(SearchImpl);

GroupParams16 search_clip_group(const float* x, int n, int bits, double alpha_max, uint8_t* codes) {
  return HWY_DYNAMIC_DISPATCH(SearchImpl)(x, n, bits, alpha_max, codes);
}

namespace scalar {
GroupParams16 search_clip_group(const float* x, int n, int bits, double alpha_max, uint8_t* codes) {
  thread_local std::vector<uint8_t> trial;
  trial.resize(static_cast<std::size_t>(n));
  GroupParams16 best = clip_group(x, n, bits, clip_candidate(alpha_max, 0), codes);
  double best_error = group_error(x, codes, n, best);
  for (int c = 1; c < kClipCandidates; ++c) {
    const GroupParams16 p = clip_group(x, n, bits, clip_candidate(alpha_max, c), trial.data());
    const double e = group_error(x, trial.data(), n, p);
    if (e < best_error) {  // strictly less: ties keep the larger factor
      best_error = e;
      best = p;
      std::copy_n(trial.data(), n, codes);
    }
  }
  return best;
}
}  // namespace scalar

}  // namespace veloxquant::skvq
#endif  // HWY_ONCE
