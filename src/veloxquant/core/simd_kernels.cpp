// Highway kernels for simd_kernels.h, compiled once per target and dispatched at run time.
// Sums are accumulated lane-wise and reduced at the end, so they differ from the scalar
// reference only by float reassociation (the tests bound that); every other kernel is exact.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/core/simd_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/core/simd_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::core::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotImpl(const float* a, const float* b, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  auto acc0 = hn::Zero(d);
  auto acc1 = hn::Zero(d);
  std::size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes), acc1);
  }
  for (; i + lanes <= n; i += lanes) acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void ButterflyImpl(float* a, float* b, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto x = hn::LoadU(d, a + i);
    const auto y = hn::LoadU(d, b + i);
    hn::StoreU(hn::Add(x, y), d, a + i);
    hn::StoreU(hn::Sub(x, y), d, b + i);
  }
  for (; i < n; ++i) {
    const float x = a[i], y = b[i];
    a[i] = x + y;
    b[i] = x - y;
  }
}

// The Walsh-Hadamard stages of stride 1, 2 and 4 inside each run of 8 floats, in registers: per
// stage the partner lanes by one in-block shuffle (or the 128-bit halves swapped), then a + b in
// the lower lane of each pair and partner - self in the upper one — the reference's additions,
// element for element. Returns false where vectors are not 8 lanes (the caller runs the scalar
// stages). n a multiple of 8.
bool FwhtShortStridesImpl(float* x, std::size_t n) {
#if HWY_TARGET != HWY_SCALAR && HWY_MAX_BYTES >= 32
  const hn::CappedTag<float, 8> d;
  if (hn::Lanes(d) != 8) return false;
  const hn::RebindToSigned<decltype(d)> di;
  const auto lane = hn::Iota(di, 0);
  const auto upper2 = hn::RebindMask(d, hn::Ne(hn::And(lane, hn::Set(di, 2)), hn::Zero(di)));
  const auto upper4 = hn::RebindMask(d, hn::Ne(hn::And(lane, hn::Set(di, 4)), hn::Zero(di)));
  for (std::size_t i = 0; i < n; i += 8) {
    auto v = hn::LoadU(d, x + i);
    auto t = hn::Shuffle2301(v);  // partners at stride 1
    v = hn::OddEven(hn::Sub(t, v), hn::Add(v, t));
    t = hn::Shuffle1032(v);  // stride 2: the 64-bit halves of each 128-bit block swapped
    v = hn::IfThenElse(upper2, hn::Sub(t, v), hn::Add(v, t));
    t = hn::ConcatLowerUpper(d, v, v);  // stride 4: the 128-bit halves swapped
    v = hn::IfThenElse(upper4, hn::Sub(t, v), hn::Add(v, t));
    hn::StoreU(v, d, x + i);
  }
  return true;
#else
  (void)x;
  (void)n;
  return false;
#endif
}

void ScaleImpl(float* x, float s, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto vs = hn::Set(d, s);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vs), d, x + i);
  for (; i < n; ++i) x[i] *= s;
}

void MultiplyImpl(const float* a, const float* b, float* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = a[i] * b[i];
}

float LutSumImpl(const float* lut, const uint8_t* bytes, std::size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const std::size_t lanes = hn::Lanes(df);
  auto acc = hn::Zero(df);
  // Table p occupies lut[p*256 .. p*256+255]; lane k of block p0 looks up table p0 + k.
  const auto lane_offset = hn::ShiftLeft<8>(hn::Iota(di, 0));
  std::size_t p = 0;
  for (; p + lanes <= n; p += lanes) {
    const auto code = hn::PromoteTo(di, hn::LoadU(d8, bytes + p));
    const auto index = hn::Add(code, lane_offset);
    acc = hn::Add(acc, hn::GatherIndex(df, lut + p * 256, index));
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; p < n; ++p) sum += lut[p * 256 + bytes[p]];
  return sum;
}

void CountBelowImpl(const float* x, std::size_t n, const float* boundaries, std::size_t nb, uint8_t* idx) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  if (nb <= 31) {  // a compare per boundary beats a binary search for small codebooks
    for (; i + lanes <= n; i += lanes) {
      const auto v = hn::LoadU(df, x + i);
      auto count = hn::Zero(di);
      for (std::size_t k = 0; k < nb; ++k) {
        // Gt gives all-ones lanes (-1 as int32) where the boundary is strictly below x.
        const auto below = hn::Lt(hn::Set(df, boundaries[k]), v);
        count = hn::Sub(count, hn::VecFromMask(di, hn::RebindMask(di, below)));
      }
      hn::StoreU(hn::DemoteTo(d8, count), d8, idx + i);
    }
  }
  for (; i < n; ++i) {
    std::size_t lo = 0, hi = nb;
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (boundaries[mid] < x[i])
        lo = mid + 1;
      else
        hi = mid;
    }
    idx[i] = static_cast<uint8_t>(lo);
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace veloxquant::core::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::core::simd {
HWY_EXPORT(DotImpl);
HWY_EXPORT(ButterflyImpl);
HWY_EXPORT(FwhtShortStridesImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(MultiplyImpl);
HWY_EXPORT(LutSumImpl);
HWY_EXPORT(CountBelowImpl);
HWY_EXPORT(TargetNameImpl);

float dot(const float* a, const float* b, std::size_t n) { return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n); }
void butterfly(float* a, float* b, std::size_t n) { HWY_DYNAMIC_DISPATCH(ButterflyImpl)(a, b, n); }
void fwht_short_strides(float* x, std::size_t n) {
  if (!HWY_DYNAMIC_DISPATCH(FwhtShortStridesImpl)(x, n)) scalar::fwht_short_strides(x, n);
}
void scale(float* x, float s, std::size_t n) { HWY_DYNAMIC_DISPATCH(ScaleImpl)(x, s, n); }
void multiply(const float* a, const float* b, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(MultiplyImpl)(a, b, out, n);
}
float lut_sum(const float* lut, const uint8_t* bytes, std::size_t n) {
  return HWY_DYNAMIC_DISPATCH(LutSumImpl)(lut, bytes, n);
}
void count_below(const float* x, std::size_t n, const float* boundaries, std::size_t nb, uint8_t* idx) {
  HWY_DYNAMIC_DISPATCH(CountBelowImpl)(x, n, boundaries, nb, idx);
}
const char* target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }
}  // namespace veloxquant::core::simd
#endif
