// Highway's foreach_target re-includes this file once per SIMD target; HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled target on first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/simd_dot.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "base/half.h"
#include "lm/kernels/simd_dot.h"
#include "lm/weights/block_formats.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 f32 lanes: every format's sub-blocks (16 or 32 elements) are a whole number of
// vectors, so no block straddles a vector and no masking is needed inside blocks.
using DF = hn::CappedTag<float, 16>;

template <class D>
HWY_INLINE float reduce(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}

// Loads N f32 values from N u8 codes.
template <class D>
HWY_INLINE hn::Vec<D> u8_to_f32(D df, hn::Vec<hn::Rebind<uint8_t, D>> q) {
  const hn::Rebind<int32_t, D> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, q));
}

float DotF32(const float* w, const float* x, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::MulAdd(hn::LoadU(df, w + i), hn::LoadU(df, x + i), a0);
    a1 = hn::MulAdd(hn::LoadU(df, w + i + N), hn::LoadU(df, x + i + N), a1);
  }
  for (; i + N <= n; i += N) a0 = hn::MulAdd(hn::LoadU(df, w + i), hn::LoadU(df, x + i), a0);
  float sum = reduce(df, hn::Add(a0, a1));
  for (; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

float DotF16(const uint16_t* w, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto* h = reinterpret_cast<const hwy::float16_t*>(w);
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) acc = hn::MulAdd(hn::PromoteTo(df, hn::LoadU(dh, h + i)), hn::LoadU(df, x + i), acc);
  float sum = reduce(df, acc);
  for (; i < n; ++i) sum += base::f16_to_f32(w[i]) * x[i];
  return sum;
}

// bf16 is the top half of an f32: widen the bits and shift them into place.
template <class D>
HWY_INLINE hn::Vec<D> load_bf16(D df, const uint16_t* p) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::Rebind<uint32_t, D> du32;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
}

float DotBF16(const uint16_t* w, const float* x, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) acc = hn::MulAdd(load_bf16(df, w + i), hn::LoadU(df, x + i), acc);
  float sum = reduce(df, acc);
  for (; i < n; ++i) sum += base::bf16_to_f32(w[i]) * x[i];
  return sum;
}

float DotQ4_0(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ4_0*>(row);
  const auto mask = hn::Set(du8, 0x0f);
  const auto eight = hn::Set(df, 8.0f);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK4_0; ++b, x += kQK4_0) {
    auto t = hn::Zero(df);
    for (size_t j = 0; j < 16; j += N) {
      const auto q = hn::LoadU(du8, blocks[b].qs + j);
      t = hn::MulAdd(hn::Sub(u8_to_f32(df, hn::And(q, mask)), eight), hn::LoadU(df, x + j), t);
      t = hn::MulAdd(hn::Sub(u8_to_f32(df, hn::ShiftRight<4>(q)), eight), hn::LoadU(df, x + 16 + j), t);
    }
    acc = hn::MulAdd(hn::Set(df, base::f16_to_f32(blocks[b].d)), t, acc);
  }
  return reduce(df, acc);
}

float DotQ4_1(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ4_1*>(row);
  const auto mask = hn::Set(du8, 0x0f);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK4_1; ++b, x += kQK4_1) {
    // x = d*q + m: d * sum(q*x) + m * sum(x), both sums kept as vectors.
    auto tq = hn::Zero(df), tx = hn::Zero(df);
    for (size_t j = 0; j < 16; j += N) {
      const auto q = hn::LoadU(du8, blocks[b].qs + j);
      const auto xl = hn::LoadU(df, x + j), xh = hn::LoadU(df, x + 16 + j);
      tq = hn::MulAdd(u8_to_f32(df, hn::And(q, mask)), xl, tq);
      tq = hn::MulAdd(u8_to_f32(df, hn::ShiftRight<4>(q)), xh, tq);
      tx = hn::Add(tx, hn::Add(xl, xh));
    }
    acc = hn::MulAdd(hn::Set(df, base::f16_to_f32(blocks[b].d)), tq, acc);
    acc = hn::MulAdd(hn::Set(df, base::f16_to_f32(blocks[b].m)), tx, acc);
  }
  return reduce(df, acc);
}

float DotQ8_0(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<int8_t, DF> di8;
  const hn::Rebind<int32_t, DF> di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ8_0*>(row);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    auto t = hn::Zero(df);
    for (size_t j = 0; j < 32; j += N) {
      const auto q = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, blocks[b].qs + j)));
      t = hn::MulAdd(q, hn::LoadU(df, x + j), t);
    }
    acc = hn::MulAdd(hn::Set(df, base::f16_to_f32(blocks[b].d)), t, acc);
  }
  return reduce(df, acc);
}

float DotQ4_K(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ4_K*>(row);
  const auto mask = hn::Set(du8, 0x0f);
  auto acc = hn::Zero(df), mins = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockQ4_K& block = blocks[b];
    const float d = base::f16_to_f32(block.d), dmin = base::f16_to_f32(block.dmin);
    for (int g = 0; g < 4; ++g) {
      uint8_t sc_lo, mn_lo, sc_hi, mn_hi;
      unpack_q4_k_scale(block.scales, 2 * g, sc_lo, mn_lo);
      unpack_q4_k_scale(block.scales, 2 * g + 1, sc_hi, mn_hi);
      const uint8_t* q = block.qs + 32 * g;
      const float* xg = x + 64 * g;
      auto t_lo = hn::Zero(df), t_hi = hn::Zero(df), x_lo = hn::Zero(df), x_hi = hn::Zero(df);
      for (size_t l = 0; l < 32; l += N) {
        const auto v = hn::LoadU(du8, q + l);
        const auto xl = hn::LoadU(df, xg + l), xh = hn::LoadU(df, xg + 32 + l);
        t_lo = hn::MulAdd(u8_to_f32(df, hn::And(v, mask)), xl, t_lo);
        t_hi = hn::MulAdd(u8_to_f32(df, hn::ShiftRight<4>(v)), xh, t_hi);
        x_lo = hn::Add(x_lo, xl);
        x_hi = hn::Add(x_hi, xh);
      }
      acc = hn::MulAdd(hn::Set(df, d * sc_lo), t_lo, acc);
      acc = hn::MulAdd(hn::Set(df, d * sc_hi), t_hi, acc);
      mins = hn::MulAdd(hn::Set(df, dmin * mn_lo), x_lo, mins);
      mins = hn::MulAdd(hn::Set(df, dmin * mn_hi), x_hi, mins);
    }
  }
  return reduce(df, hn::Sub(acc, mins));
}

float DotQ6_K(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ6_K*>(row);
  const auto low4 = hn::Set(du8, 0x0f), low2 = hn::Set(du8, 0x03);
  const auto bias = hn::Set(di32, 32);
  const auto widen = [&](hn::Vec<hn::Rebind<uint8_t, DF>> q) {
    return hn::ConvertTo(df, hn::Sub(hn::PromoteTo(di32, q), bias));
  };
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockQ6_K& block = blocks[b];
    const float d = base::f16_to_f32(block.d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      const int8_t* sc = block.scales + 8 * half;
      const float* xh = x + 128 * half;
      // Element 32k + l of the half: low bits from ql[l + 32(k&1)] (nibble k >> 1), high
      // bits at 2k of qh[l]; scale sc[l/16 + 2k]. N divides 16, so l/16 is fixed per vector.
      for (size_t l = 0; l < 32; l += N) {
        const auto a = hn::LoadU(du8, ql + l), c = hn::LoadU(du8, ql + 32 + l), h = hn::LoadU(du8, qh + l);
        const auto q0 = hn::Or(hn::And(a, low4), hn::ShiftLeft<4>(hn::And(h, low2)));
        const auto q1 = hn::Or(hn::And(c, low4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), low2)));
        const auto q2 = hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), low2)));
        const auto q3 = hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::ShiftRight<6>(h)));
        const int s = static_cast<int>(l / 16);
        acc = hn::MulAdd(hn::Set(df, d * sc[s]), hn::Mul(widen(q0), hn::LoadU(df, xh + l)), acc);
        acc = hn::MulAdd(hn::Set(df, d * sc[s + 2]), hn::Mul(widen(q1), hn::LoadU(df, xh + 32 + l)), acc);
        acc = hn::MulAdd(hn::Set(df, d * sc[s + 4]), hn::Mul(widen(q2), hn::LoadU(df, xh + 64 + l)), acc);
        acc = hn::MulAdd(hn::Set(df, d * sc[s + 6]), hn::Mul(widen(q3), hn::LoadU(df, xh + 96 + l)), acc);
      }
    }
  }
  return reduce(df, acc);
}

void AxpyF32(float a, const float* v, float* out, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto va = hn::Set(df, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, hn::LoadU(df, v + i), hn::LoadU(df, out + i)), df, out + i);
  for (; i < n; ++i) out[i] += a * v[i];
}

void AxpyF16(float a, const uint16_t* v, float* out, int64_t n) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto* h = reinterpret_cast<const hwy::float16_t*>(v);
  const auto va = hn::Set(df, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(va, hn::PromoteTo(df, hn::LoadU(dh, h + i)), hn::LoadU(df, out + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] += a * base::f16_to_f32(v[i]);
}

void AxpyBF16(float a, const uint16_t* v, float* out, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto va = hn::Set(df, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, load_bf16(df, v + i), hn::LoadU(df, out + i)), df, out + i);
  for (; i < n; ++i) out[i] += a * base::bf16_to_f32(v[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lm::kernels::simd {

HWY_EXPORT(DotF32);
HWY_EXPORT(DotF16);
HWY_EXPORT(DotBF16);
HWY_EXPORT(DotQ4_0);
HWY_EXPORT(DotQ4_1);
HWY_EXPORT(DotQ8_0);
HWY_EXPORT(DotQ4_K);
HWY_EXPORT(DotQ6_K);
HWY_EXPORT(AxpyF32);
HWY_EXPORT(AxpyF16);
HWY_EXPORT(AxpyBF16);

float dot_f32(const float* w, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotF32)(w, x, n); }
float dot_f16(const uint16_t* w, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotF16)(w, x, n); }
float dot_bf16(const uint16_t* w, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotBF16)(w, x, n); }
float dot_q4_0(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ4_0)(row, x, n); }
float dot_q4_1(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ4_1)(row, x, n); }
float dot_q8_0(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ8_0)(row, x, n); }
float dot_q4_k(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ4_K)(row, x, n); }
float dot_q6_k(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ6_K)(row, x, n); }
void axpy_f32(float a, const float* v, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyF32)(a, v, out, n); }
void axpy_f16(float a, const uint16_t* v, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyF16)(a, v, out, n); }
void axpy_bf16(float a, const uint16_t* v, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyBF16)(a, v, out, n); }

}  // namespace lm::kernels::simd
#endif  // HWY_ONCE
