// Highway kernel for first_minimum.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/first_minimum.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>

#include "veloxquant/eviction/first_minimum.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Two passes: the minimum over the numbers (a lane takes a value only when it is below the lane's
// current one, so a NaN never enters), then the first index holding a value equal to it.
int64_t FirstMinimumImpl(const float* x, int64_t n) {
  if (std::isnan(x[0])) return 0;
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto low = hn::Set(d, x[0]);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    low = hn::IfThenElse(hn::Lt(v, low), v, low);
  }
  float best = x[0];
  for (; i < n; ++i) best = x[i] < best ? x[i] : best;
  HWY_ALIGN float lane_low[hn::MaxLanes(d)];
  hn::Store(low, d, lane_low);
  for (int64_t l = 0; l < lanes; ++l) best = lane_low[l] < best ? lane_low[l] : best;
  const auto target = hn::Set(d, best);
  for (i = 0; i + lanes <= n; i += lanes) {
    const intptr_t first = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, x + i), target));
    if (first >= 0) return i + first;
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // not reached: best is one of x
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(FirstMinimumImpl);

int64_t first_minimum(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(FirstMinimumImpl)(x, n); }

namespace scalar {
int64_t first_minimum(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] < x[best]) best = i;
  }
  return best;
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
