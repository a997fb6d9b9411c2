// Highway kernels for scale_trials.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/quant/scale_trials.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/quant/scale_trials.h"

#include <algorithm>
#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::quant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR && HWY_HAVE_FLOAT64
// Lanes = trials: the f32 steps (x * inv, the code, its level) in a half-width f32 vector, the
// error in f64 lanes, multiply and add apart (this file is built with -ffp-contract=off) as the
// scalar loops compute them. level_of(v) gives each lane's level for its scaled value v.
template <class LevelOf>
void trial_errors_by_lane(const float* x, int n, const float* scales, int n_scales, double* errors,
                          const LevelOf& level_of) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  for (int64_t t0 = 0; t0 < n_scales; t0 += N) {
    const int64_t live = std::min<int64_t>(N, n_scales - t0);
    // Dead lanes repeat the first scale; their sums are not stored.
    HWY_ALIGN float s_lanes[hn::MaxLanes(df)];
    HWY_ALIGN float inv_lanes[hn::MaxLanes(df)];
    for (int64_t t = 0; t < N; ++t) {
      s_lanes[t] = scales[t0 + (t < live ? t : 0)];
      inv_lanes[t] = 1.0f / s_lanes[t];
    }
    const auto inv = hn::Load(df, inv_lanes);
    const auto sd = hn::PromoteTo(dd, hn::Load(df, s_lanes));
    auto err = hn::Zero(dd);
    for (int i = 0; i < n; ++i) {
      const auto level = level_of(hn::Mul(hn::Set(df, x[i]), inv));
      const auto e = hn::Sub(hn::Set(dd, static_cast<double>(x[i])), hn::Mul(sd, hn::PromoteTo(dd, level)));
      err = hn::Add(err, hn::Mul(e, e));
    }
    HWY_ALIGN double out[hn::MaxLanes(dd)];
    hn::Store(err, dd, out);
    for (int64_t t = 0; t < live; ++t) errors[t0 + t] = out[t];
  }
}

// Even 8-bit levels: the closed-form code clamp(ceil(128 v) + 127, 0, 255), its level exactly.
void TrialErrorsImpl(const float* x, int n, const float* scales, int n_scales, double* errors) {
  const hn::Rebind<float, hn::ScalableTag<double>> df;
  const auto k128 = hn::Set(df, 128.0f), k127 = hn::Set(df, 127.0f);
  const auto lo = hn::Zero(df), hi = hn::Set(df, 255.0f);
  const auto two = hn::Set(df, 2.0f / 256.0f), offset = hn::Set(df, -255.0f / 256.0f);
  trial_errors_by_lane(x, n, scales, n_scales, errors, [&](hn::Vec<decltype(df)> v) HWY_ATTR {
    const auto code = hn::Min(hn::Max(hn::Add(hn::Ceil(hn::Mul(v, k128)), k127), lo), hi);
    return hn::Add(hn::Mul(code, two), offset);  // exact: (2c - 255) / 256
  });
}

// Levels of any spacing: each lane's level by a chain of compares and selects (boundaries ascend,
// so the lanes above boundary k are exactly those past its first k + 1).
template <int B>
void level_trials(const float* x, int n, const float* scales, int n_scales, const float* levels,
                  const float* boundaries, double* errors) {
  const hn::Rebind<float, hn::ScalableTag<double>> df;
  using VF = hn::Vec<decltype(df)>;
  constexpr int kBoundaries = (1 << B) - 1;
  VF bound[kBoundaries], level_at[kBoundaries + 1];
  for (int k = 0; k < kBoundaries; ++k) bound[k] = hn::Set(df, boundaries[k]);
  for (int k = 0; k <= kBoundaries; ++k) level_at[k] = hn::Set(df, levels[k]);
  trial_errors_by_lane(x, n, scales, n_scales, errors, [&](VF v) HWY_ATTR {
    VF level = level_at[0];
#pragma GCC unroll 16
    for (int k = 0; k < kBoundaries; ++k) level = hn::IfThenElse(hn::Gt(v, bound[k]), level_at[k + 1], level);
    return level;
  });
}

void LevelTrialErrorsImpl(const float* x, int n, const float* scales, int n_scales, const float* levels,
                          const float* boundaries, int bits, double* errors) {
  switch (bits) {
    case 1:
      return level_trials<1>(x, n, scales, n_scales, levels, boundaries, errors);
    case 2:
      return level_trials<2>(x, n, scales, n_scales, levels, boundaries, errors);
    case 3:
      return level_trials<3>(x, n, scales, n_scales, levels, boundaries, errors);
    case 4:
      return level_trials<4>(x, n, scales, n_scales, levels, boundaries, errors);
    default:
      return scalar::level_trial_errors(x, n, scales, n_scales, levels, boundaries, bits, errors);
  }
}
#else
void TrialErrorsImpl(const float* x, int n, const float* scales, int n_scales, double* errors) {
  scalar::even_byte_trial_errors(x, n, scales, n_scales, errors);
}
void LevelTrialErrorsImpl(const float* x, int n, const float* scales, int n_scales, const float* levels,
                          const float* boundaries, int bits, double* errors) {
  scalar::level_trial_errors(x, n, scales, n_scales, levels, boundaries, bits, errors);
}
#endif

}  // namespace veloxquant::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::quant {
HWY_EXPORT(TrialErrorsImpl);
HWY_EXPORT(LevelTrialErrorsImpl);

bool can_batch_level_trials(int bits) { return bits >= 1 && bits <= 4; }

void level_trial_errors(const float* x, int n, const float* scales, int n_scales, const float* levels,
                        const float* boundaries, int bits, double* errors) {
  HWY_DYNAMIC_DISPATCH(LevelTrialErrorsImpl)(x, n, scales, n_scales, levels, boundaries, bits, errors);
}

uint8_t even_byte_code(float v) {
  const float c = std::min(std::max(std::ceil(v * 128.0f) + 127.0f, 0.0f), 255.0f);
  return static_cast<uint8_t>(c);
}

void even_byte_trial_errors(const float* x, int n, const float* scales, int n_scales, double* errors) {
  HWY_DYNAMIC_DISPATCH(TrialErrorsImpl)(x, n, scales, n_scales, errors);
}

namespace scalar {
void even_byte_trial_errors(const float* x, int n, const float* scales, int n_scales, double* errors) {
  for (int t = 0; t < n_scales; ++t) {
    const float s = scales[t], inv = 1.0f / s;
    double err = 0.0;
    for (int i = 0; i < n; ++i) {
      const float level = (2.0f * static_cast<float>(even_byte_code(x[i] * inv)) - 255.0f) / 256.0f;
      const double e = static_cast<double>(x[i]) - static_cast<double>(s) * level;
      err += e * e;
    }
    errors[t] = err;
  }
}

void level_trial_errors(const float* x, int n, const float* scales, int n_scales, const float* levels,
                        const float* boundaries, int bits, double* errors) {
  const int n_boundaries = (1 << bits) - 1;
  for (int t = 0; t < n_scales; ++t) {
    const float s = scales[t], inv = 1.0f / s;
    double err = 0.0;
    for (int i = 0; i < n; ++i) {
      const float v = x[i] * inv;
      int code = 0;
      while (code < n_boundaries && boundaries[code] < v) ++code;
      const double e = static_cast<double>(x[i]) - static_cast<double>(s) * levels[code];
      err += e * e;
    }
    errors[t] = err;
  }
}
}  // namespace scalar

}  // namespace veloxquant::quant
#endif  // HWY_ONCE
