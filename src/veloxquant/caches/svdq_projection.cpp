// Highway kernel for svdq_projection.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/svdq_projection.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/svdq_projection.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void ProjectImpl(const float* basis, int64_t coded, int64_t dim, const float* keys, int64_t rows, double* scratch,
                 float* z) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const int64_t padded = (coded + lanes - 1) / lanes * lanes;
  // The basis transposed and widened: scratch[c * padded + i] = basis[i][c] (0 past coded).
  for (int64_t c = 0; c < dim; ++c) {
    for (int64_t i = 0; i < padded; ++i)
      scratch[c * padded + i] = i < coded ? static_cast<double>(basis[i * dim + c]) : 0.0;
  }
  for (int64_t t = 0; t < rows; ++t) {
    const float* k = keys + t * dim;
    float* out = z + t * coded;
    for (int64_t i = 0; i < padded; i += lanes) {
      // sum_c basis[i][c] * k[c] in channel order; the products are exact in f64, so MulAdd rounds
      // once per term exactly as the scalar multiply-then-add.
      auto acc = hn::Zero(dd);
      for (int64_t c = 0; c < dim; ++c)
        acc = hn::MulAdd(hn::LoadU(dd, scratch + c * padded + i), hn::Set(dd, static_cast<double>(k[c])), acc);
      const auto narrowed = hn::DemoteTo(df, acc);
      if (i + lanes <= coded) {
        hn::StoreU(narrowed, df, out + i);
      } else {
        HWY_ALIGN float tail[64];
        hn::Store(narrowed, df, tail);
        for (int64_t l = 0; i + l < coded; ++l) out[i + l] = tail[l];
      }
    }
  }
}

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(ProjectImpl);

int64_t svdq_projection_scratch(int64_t coded, int64_t dim) { return (coded + 16) * dim; }

void project_latent_rows(const float* basis, int64_t coded, int64_t dim, const float* keys, int64_t rows,
                         double* scratch, float* z) {
  HWY_DYNAMIC_DISPATCH(ProjectImpl)(basis, coded, dim, keys, rows, scratch, z);
}

namespace scalar {
void project_latent_rows(const float* basis, int64_t coded, int64_t dim, const float* keys, int64_t rows, float* z) {
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < coded; ++i) {
      const float* dir = basis + i * dim;
      double dot = 0.0;
      for (int64_t c = 0; c < dim; ++c) dot += static_cast<double>(dir[c]) * keys[t * dim + c];
      z[t * coded + i] = static_cast<float>(dot);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant
#endif  // HWY_ONCE
