// Highway kernel for upper_gram.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/eviction/upper_gram.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/eviction/upper_gram.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AccumulateUpperGramImpl(const double* rows, int64_t count, int64_t dim, double* gram) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    for (int64_t r = 0; r < dim; ++r) {
      const auto mr = hn::Set(d, m[r]);
      double* g = gram + r * dim;
      // From the vector boundary at or below the diagonal: the few entries left of it are
      // below the diagonal (the callers overwrite them), and every vector load is whole.
      int64_t c = r - r % lanes;
      for (; c + lanes <= dim; c += lanes) {
        hn::StoreU(hn::Add(hn::LoadU(d, g + c), hn::Mul(mr, hn::LoadU(d, m + c))), d, g + c);
      }
      for (; c < dim; ++c) g[c] += m[r] * m[c];
    }
  }
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::eviction {
HWY_EXPORT(AccumulateUpperGramImpl);

void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram) {
  HWY_DYNAMIC_DISPATCH(AccumulateUpperGramImpl)(rows, count, dim, gram);
}

namespace scalar {
void accumulate_upper_gram(const double* rows, int64_t count, int64_t dim, double* gram) {
  for (int64_t j = 0; j < count; ++j) {
    const double* m = rows + j * dim;
    for (int64_t r = 0; r < dim; ++r) {
      const double mr = m[r];
      double* g = gram + r * dim;
      for (int64_t c = r; c < dim; ++c) g[c] += mr * m[c];
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::eviction
#endif  // HWY_ONCE
