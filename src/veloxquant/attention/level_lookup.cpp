// Highway kernel for level_lookup.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/level_lookup.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/level_lookup.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void LookupLevelsImpl(float* x, int64_t n, const float* levels, int n_levels) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  if (n_levels <= lanes) {
    // The whole table in one register (padded with its last level, never selected).
    HWY_ALIGN float table[hn::MaxLanes(df)];
    for (int64_t k = 0; k < lanes; ++k) table[k] = levels[k < n_levels ? k : n_levels - 1];
    const auto t = hn::Load(df, table);
    for (; i + lanes <= n; i += lanes) {
      const auto idx = hn::IndicesFromVec(df, hn::ConvertTo(di, hn::LoadU(df, x + i)));
      hn::StoreU(hn::TableLookupLanes(t, idx), df, x + i);
    }
  } else {
    for (; i + lanes <= n; i += lanes) {
      hn::StoreU(hn::GatherIndex(df, levels, hn::ConvertTo(di, hn::LoadU(df, x + i))), df, x + i);
    }
  }
  for (; i < n; ++i) x[i] = levels[static_cast<int>(x[i])];
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(LookupLevelsImpl);

void lookup_levels(float* x, int64_t n, const float* levels, int n_levels) {
  HWY_DYNAMIC_DISPATCH(LookupLevelsImpl)(x, n, levels, n_levels);
}

namespace scalar {
void lookup_levels(float* x, int64_t n, const float* levels, int /*n_levels*/) {
  for (int64_t i = 0; i < n; ++i) x[i] = levels[static_cast<int>(x[i])];
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
