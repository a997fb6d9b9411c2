// Highway kernels for boundary_counts.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/quant/boundary_counts.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/dense_code_lookup-inl.h"
#include "veloxquant/quant/boundary_counts.h"

#include <algorithm>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::quant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// 2^B levels in 8 groups of G (B >= 3; B <= 2: the 2^B - 1 boundaries compared directly, G = 1
// with fewer groups). Whole vectors of 8 values; the caller finishes the tail.
template <int B>
int count_vectors(const float* x, int n, float inv, const float* boundaries, uint8_t* codes) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint8_t, decltype(di)> du8;
  using VF = hn::Vec<decltype(df)>;
  constexpr int kLevels = 1 << B;
  constexpr int kGroup = B >= 3 ? kLevels / 8 : 1;
  constexpr int kCoarse = B >= 3 ? 7 : kLevels - 1;  // boundaries between groups
  constexpr int kShift = B >= 3 ? B - 3 : 0;         // log2(kGroup)
  VF coarse[kCoarse];
  for (int m = 0; m < kCoarse; ++m) coarse[m] = hn::Set(df, boundaries[(m + 1) * kGroup - 1]);
  // fine[t] lane g: boundary t inside group g.
  HWY_ALIGN float fine[kGroup > 1 ? kGroup - 1 : 1][8];
  for (int t = 0; t + 1 < kGroup; ++t) {
    for (int g = 0; g < 8; ++g) fine[t][g] = boundaries[g * kGroup + t];
  }
  const VF scale = hn::Set(df, inv);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const VF v = hn::Mul(hn::LoadU(df, x + i), scale);  // the scalar loop's x * inv
    auto group = hn::Zero(di);
#pragma GCC unroll 7
    for (int m = 0; m < kCoarse; ++m)
      group = hn::Sub(group, hn::VecFromMask(di, hn::RebindMask(di, hn::Lt(coarse[m], v))));
    auto code = hn::ShiftLeft<kShift>(group);
#pragma GCC unroll 31
    for (int t = 0; t + 1 < kGroup; ++t) {
      const VF f = attention::kernels::HWY_NAMESPACE::permute_lanes8(df, hn::Load(df, fine[t]), hn::BitCast(du, group));
      code = hn::Sub(code, hn::VecFromMask(di, hn::RebindMask(di, hn::Lt(f, v))));
    }
    hn::StoreU(hn::DemoteTo(du8, code), du8, codes + i);
  }
  return i;
}

void CountBoundariesImpl(const float* x, int n, float inv, const float* boundaries, int bits, uint8_t* codes) {
  int done = 0;
  if constexpr (hn::MaxLanes(hn::CappedTag<float, 8>()) == 8) {
    switch (bits) {
      case 1:
        done = count_vectors<1>(x, n, inv, boundaries, codes);
        break;
      case 2:
        done = count_vectors<2>(x, n, inv, boundaries, codes);
        break;
      case 3:
        done = count_vectors<3>(x, n, inv, boundaries, codes);
        break;
      case 4:
        done = count_vectors<4>(x, n, inv, boundaries, codes);
        break;
      case 5:
        done = count_vectors<5>(x, n, inv, boundaries, codes);
        break;
      case 6:
        done = count_vectors<6>(x, n, inv, boundaries, codes);
        break;
      case 7:
        done = count_vectors<7>(x, n, inv, boundaries, codes);
        break;
      case 8:
        done = count_vectors<8>(x, n, inv, boundaries, codes);
        break;
      default:
        break;
    }
  }
  scalar::count_boundaries_below(x + done, n - done, inv, boundaries, bits, codes + done);
}
#else
void CountBoundariesImpl(const float* x, int n, float inv, const float* boundaries, int bits, uint8_t* codes) {
  scalar::count_boundaries_below(x, n, inv, boundaries, bits, codes);
}
#endif

}  // namespace veloxquant::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::quant {
HWY_EXPORT(CountBoundariesImpl);

void count_boundaries_below(const float* x, int n, float inv, const float* boundaries, int bits, uint8_t* codes) {
  HWY_DYNAMIC_DISPATCH(CountBoundariesImpl)(x, n, inv, boundaries, bits, codes);
}

namespace scalar {
void count_boundaries_below(const float* x, int n, float inv, const float* boundaries, int bits, uint8_t* codes) {
  const int nb = (1 << bits) - 1;
  for (int i = 0; i < n; ++i) {
    const float v = x[i] * inv;
    int below = 0;
    for (int k = 0; k < nb; ++k) below += boundaries[k] < v ? 1 : 0;
    codes[i] = static_cast<uint8_t>(below);
  }
}
}  // namespace scalar

}  // namespace veloxquant::quant
#endif  // HWY_ONCE
