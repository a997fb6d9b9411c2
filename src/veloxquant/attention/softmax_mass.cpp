// Highway kernel for softmax_mass.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/softmax_mass.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cmath>

#include "hwy/contrib/math/math-inl.h"
#include "veloxquant/attention/softmax_mass.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AddSoftmaxMassImpl(float* logits, int64_t n, float top, double* mass) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vtop = hn::Set(df, top);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    hn::StoreU(hn::CallExp(df, hn::Sub(hn::LoadU(df, logits + j), vtop)), df, logits + j);
  }
  if (j < n) {  // the last, partial vector through a padded copy; only its own lanes go back
    HWY_ALIGN float tail[hn::MaxLanes(df)] = {};
    for (int64_t t = 0; t < n - j; ++t) tail[t] = logits[j + t];
    hn::Store(hn::CallExp(df, hn::Sub(hn::Load(df, tail), vtop)), df, tail);
    for (int64_t t = 0; t < n - j; ++t) logits[j + t] = tail[t];
  }
  // The sum and the masses in double, a double vector of rows at a time.
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> d4;
  const int64_t quad = static_cast<int64_t>(hn::Lanes(d4));
  auto acc = hn::Zero(dd);
  j = 0;
  for (; j + quad <= n; j += quad) acc = hn::Add(acc, hn::PromoteTo(dd, hn::LoadU(d4, logits + j)));
  double sum = hn::GetLane(hn::SumOfLanes(dd, acc));
  for (int64_t t = j; t < n; ++t) sum += static_cast<double>(logits[t]);
  const double inv = 1.0 / sum;
  const auto vinv = hn::Set(dd, inv);
  j = 0;
  for (; j + quad <= n; j += quad) {
    hn::StoreU(hn::MulAdd(hn::PromoteTo(dd, hn::LoadU(d4, logits + j)), vinv, hn::LoadU(dd, mass + j)), dd, mass + j);
  }
  for (; j < n; ++j) mass[j] += static_cast<double>(logits[j]) * inv;
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(AddSoftmaxMassImpl);

void add_softmax_mass(float* logits, int64_t n, float top, double* mass) {
  if (n <= 0) return;
  if (!std::isfinite(top)) {  // a non-finite score: the plain loop, so the masses are NaN as before
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += (logits[j] = std::exp(logits[j] - top));
    for (int64_t j = 0; j < n; ++j) mass[j] += static_cast<double>(logits[j]) * (1.0 / sum);
    return;
  }
  HWY_DYNAMIC_DISPATCH(AddSoftmaxMassImpl)(logits, n, top, mass);
}

}  // namespace veloxquant::attention::kernels
#endif
