// Highway's foreach_target re-includes this file once per SIMD target; HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled target on first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/simd_dot.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "lm/kernels/dot_f32-inl.h"
#include "lm/kernels/iq4_values-inl.h"

#include <cmath>
#include <cstring>

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

// One f16 block scale to f32 through the target's conversion instruction (F16C on x86):
// the scalar bit-twiddling version costs more than the rest of a Q4 block.
HWY_INLINE float f16_scale(uint16_t bits) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  hwy::float16_t h[1];
  std::memcpy(h, &bits, sizeof bits);
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, h)));
}

// Loads N f32 values from N u8 codes.
template <class D>
HWY_INLINE hn::Vec<D> u8_to_f32(D df, hn::Vec<hn::Rebind<uint8_t, D>> q) {
  const hn::Rebind<int32_t, D> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, q));
}

float DotF32(const float* w, const float* x, int64_t n) { return dot_f32_inline(w, x, n); }

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
    acc = hn::MulAdd(hn::Set(df, f16_scale(blocks[b].d)), t, acc);
  }
  return reduce(df, acc);
}

// Q4_1 block contribution: d * sum(q*x) + m * sum(x), accumulated into acc.
template <class D>
HWY_INLINE hn::Vec<D> q4_1_block(D df, const BlockQ4_1& block, const float* x, hn::Vec<D> acc) {
  const hn::Rebind<uint8_t, D> du8;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(du8, 0x0f);
  auto tq0 = hn::Zero(df), tq1 = hn::Zero(df), tx = hn::Zero(df);
  for (size_t j = 0; j < 16; j += N) {
    const auto q = hn::LoadU(du8, block.qs + j);
    const auto xl = hn::LoadU(df, x + j), xh = hn::LoadU(df, x + 16 + j);
    tq0 = hn::MulAdd(u8_to_f32(df, hn::And(q, mask)), xl, tq0);
    tq1 = hn::MulAdd(u8_to_f32(df, hn::ShiftRight<4>(q)), xh, tq1);
    tx = hn::Add(tx, hn::Add(xl, xh));
  }
  acc = hn::MulAdd(hn::Set(df, f16_scale(block.d)), hn::Add(tq0, tq1), acc);
  return hn::MulAdd(hn::Set(df, f16_scale(block.m)), tx, acc);
}

float DotQ4_1(const void* row, const float* x, int64_t n) {
  const DF df;
  const auto* blocks = static_cast<const BlockQ4_1*>(row);
  const int64_t nb = n / kQK4_1;
  // Two independent accumulators (even / odd blocks) so consecutive blocks do not wait on
  // each other's FMA latency.
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    acc0 = q4_1_block(df, blocks[b], x + b * kQK4_1, acc0);
    acc1 = q4_1_block(df, blocks[b + 1], x + (b + 1) * kQK4_1, acc1);
  }
  if (b < nb) acc0 = q4_1_block(df, blocks[b], x + b * kQK4_1, acc0);
  return reduce(df, hn::Add(acc0, acc1));
}

template <class D>
HWY_INLINE hn::Vec<D> q8_0_block(D df, const BlockQ8_0& block, const float* x, hn::Vec<D> acc) {
  const hn::Rebind<int8_t, D> di8;
  const hn::Rebind<int32_t, D> di32;
  const size_t N = hn::Lanes(df);
  auto t0 = hn::Zero(df), t1 = hn::Zero(df);
  for (size_t j = 0; j < 32; j += 2 * N) {
    t0 = hn::MulAdd(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, block.qs + j))), hn::LoadU(df, x + j), t0);
    t1 = hn::MulAdd(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, block.qs + j + N))), hn::LoadU(df, x + j + N),
                    t1);
  }
  return hn::MulAdd(hn::Set(df, f16_scale(block.d)), hn::Add(t0, t1), acc);
}

float DotQ8_0(const void* row, const float* x, int64_t n) {
  const DF df;
  const auto* blocks = static_cast<const BlockQ8_0*>(row);
  const int64_t nb = n / kQK8_0;
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    acc0 = q8_0_block(df, blocks[b], x + b * kQK8_0, acc0);
    acc1 = q8_0_block(df, blocks[b + 1], x + (b + 1) * kQK8_0, acc1);
  }
  if (b < nb) acc0 = q8_0_block(df, blocks[b], x + b * kQK8_0, acc0);
  return reduce(df, hn::Add(acc0, acc1));
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
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    for (int64_t g = 0; g < 4; ++g) {
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

// Q5_0: x = d * (q - 16), the fifth bit of element i at bit i of the block's qh word. The
// high bits are spread to lanes with a per-lane variable shift of the broadcast word.
float DotQ5_0(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const hn::Rebind<uint32_t, DF> du32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ5_0*>(row);
  const auto mask = hn::Set(du8, 0x0f);
  const auto one = hn::Set(du32, 1u);
  const auto sixteen = hn::Set(df, 16.0f);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK5_0; ++b, x += kQK5_0) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    const auto bits = hn::Set(du32, qh);
    auto t = hn::Zero(df);
    for (size_t j = 0; j < 16; j += N) {
      const auto q = hn::LoadU(du8, blocks[b].qs + j);
      const auto lane = hn::Iota(du32, static_cast<uint32_t>(j));
      const auto high0 = hn::ShiftLeft<4>(hn::And(hn::Shr(bits, lane), one));
      const auto high1 = hn::ShiftLeft<4>(hn::And(hn::Shr(bits, hn::Add(lane, hn::Set(du32, 16u))), one));
      const auto q0 = hn::Or(hn::PromoteTo(di32, hn::And(q, mask)), hn::BitCast(di32, high0));
      const auto q1 = hn::Or(hn::PromoteTo(di32, hn::ShiftRight<4>(q)), hn::BitCast(di32, high1));
      t = hn::MulAdd(hn::Sub(hn::ConvertTo(df, q0), sixteen), hn::LoadU(df, x + j), t);
      t = hn::MulAdd(hn::Sub(hn::ConvertTo(df, q1), sixteen), hn::LoadU(df, x + 16 + j), t);
    }
    acc = hn::MulAdd(hn::Set(df, f16_scale(blocks[b].d)), t, acc);
  }
  return reduce(df, acc);
}

// Q5_K: Q4_K's structure plus bit j of qh[l] as the fifth bit of sub-block j's element l.
float DotQ5_K(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ5_K*>(row);
  const auto mask = hn::Set(du8, 0x0f);
  const auto one = hn::Set(du8, 1);
  auto acc = hn::Zero(df), mins = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockQ5_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    for (int64_t g = 0; g < 4; ++g) {
      uint8_t sc_lo, mn_lo, sc_hi, mn_hi;
      unpack_q4_k_scale(block.scales, 2 * g, sc_lo, mn_lo);
      unpack_q4_k_scale(block.scales, 2 * g + 1, sc_hi, mn_hi);
      const uint8_t* q = block.qs + 32 * g;
      const float* xg = x + 64 * g;
      auto t_lo = hn::Zero(df), t_hi = hn::Zero(df), x_lo = hn::Zero(df), x_hi = hn::Zero(df);
      for (size_t l = 0; l < 32; l += N) {
        const auto v = hn::LoadU(du8, q + l);
        const auto h = hn::ShiftRightSame(hn::LoadU(du8, block.qh + l), 2 * g);
        const auto c_lo = hn::Or(hn::And(v, mask), hn::ShiftLeft<4>(hn::And(h, one)));
        const auto c_hi = hn::Or(hn::ShiftRight<4>(v), hn::ShiftLeft<3>(hn::And(h, hn::Set(du8, 2))));
        const auto xl = hn::LoadU(df, xg + l), xh = hn::LoadU(df, xg + 32 + l);
        t_lo = hn::MulAdd(u8_to_f32(df, c_lo), xl, t_lo);
        t_hi = hn::MulAdd(u8_to_f32(df, c_hi), xh, t_hi);
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

// Q5_1: x = d * q + m with Q5_0's 5-bit q: d * sum(q * x) + m * sum(x) per block.
float DotQ5_1(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const hn::Rebind<uint32_t, DF> du32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ5_1*>(row);
  const auto mask = hn::Set(du8, 0x0f);
  const auto one = hn::Set(du32, 1u);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK5_1; ++b, x += kQK5_1) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    const auto bits = hn::Set(du32, qh);
    auto t = hn::Zero(df), tx = hn::Zero(df);
    for (size_t j = 0; j < 16; j += N) {
      const auto q = hn::LoadU(du8, blocks[b].qs + j);
      const auto lane = hn::Iota(du32, static_cast<uint32_t>(j));
      const auto high0 = hn::ShiftLeft<4>(hn::And(hn::Shr(bits, lane), one));
      const auto high1 = hn::ShiftLeft<4>(hn::And(hn::Shr(bits, hn::Add(lane, hn::Set(du32, 16u))), one));
      const auto q0 = hn::Or(hn::PromoteTo(di32, hn::And(q, mask)), hn::BitCast(di32, high0));
      const auto q1 = hn::Or(hn::PromoteTo(di32, hn::ShiftRight<4>(q)), hn::BitCast(di32, high1));
      const auto x0 = hn::LoadU(df, x + j), x1 = hn::LoadU(df, x + 16 + j);
      t = hn::MulAdd(hn::ConvertTo(df, q0), x0, t);
      t = hn::MulAdd(hn::ConvertTo(df, q1), x1, t);
      tx = hn::Add(tx, hn::Add(x0, x1));
    }
    acc = hn::MulAdd(hn::Set(df, f16_scale(blocks[b].d)), t, acc);
    acc = hn::MulAdd(hn::Set(df, f16_scale(blocks[b].m)), tx, acc);
  }
  return reduce(df, acc);
}

// sum(values * x) of 32 codebook values (iq4_values) with x.
HWY_INLINE hn::Vec<DF> iq4_block_dot(const uint8_t* qs, const float* x) {
  const DF df;
  const hn::Rebind<int8_t, DF> di8;
  const hn::Rebind<int32_t, DF> di32;
  const size_t N = hn::Lanes(df);
  alignas(16) int8_t values[32];
  iq4_values(qs, values);
  auto t = hn::Zero(df);
  for (size_t j = 0; j < 32; j += N) {
    t = hn::MulAdd(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, values + j))), hn::LoadU(df, x + j), t);
  }
  return t;
}

float DotIQ4_NL(const void* row, const float* x, int64_t n) {
  const DF df;
  const auto* blocks = static_cast<const BlockIQ4_NL*>(row);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK4_NL; ++b, x += kQK4_NL) {
    acc = hn::MulAdd(hn::Set(df, f16_scale(blocks[b].d)), iq4_block_dot(blocks[b].qs, x), acc);
  }
  return reduce(df, acc);
}

float DotIQ4_XS(const void* row, const float* x, int64_t n) {
  const DF df;
  const auto* blocks = static_cast<const BlockIQ4_XS*>(row);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockIQ4_XS& block = blocks[b];
    const float d = f16_scale(block.d);
    for (int64_t j = 0; j < 8; ++j) {
      const float dl = d * static_cast<float>(unpack_iq4_xs_scale(block, j) - 32);
      acc = hn::MulAdd(hn::Set(df, dl), iq4_block_dot(block.qs + 16 * j, x + 32 * j), acc);
    }
  }
  return reduce(df, acc);
}

// Q2_K: element 128h + 32s + l is bits 2s of qs[32h + l], sub-block 8h + 2s + l/16 (N divides
// 16): d * sc * sum(q * x) - dmin * mn * sum(x) per sub-block.
float DotQ2_K(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ2_K*>(row);
  const auto three = hn::Set(du8, 3);
  auto acc = hn::Zero(df), mins = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockQ2_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t s = 0; s < 4; ++s) {
        for (size_t l = 0; l < 32; l += N) {
          const uint8_t sc = block.scales[8 * h + 2 * s + static_cast<int>(l / 16)];
          const auto q = hn::And(hn::ShiftRightSame(hn::LoadU(du8, block.qs + 32 * h + l), 2 * s), three);
          const auto xv = hn::LoadU(df, x + 128 * h + 32 * s + l);
          acc = hn::MulAdd(hn::Set(df, d * static_cast<float>(sc & 0x0f)), hn::Mul(u8_to_f32(df, q), xv), acc);
          mins = hn::MulAdd(hn::Set(df, dmin * static_cast<float>(sc >> 4)), xv, mins);
        }
      }
    }
  }
  return reduce(df, hn::Sub(acc, mins));
}

// Q3_K: as Q2_K's layout, q = (low | bit 4h+s of hmask[l] << 2) - 4, scale d * (sc - 32).
float DotQ3_K(const void* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ3_K*>(row);
  const auto three = hn::Set(du8, 3), one = hn::Set(du8, 1);
  const auto four = hn::Set(di32, 4);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const BlockQ3_K& block = blocks[b];
    const float d = f16_scale(block.d);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t s = 0; s < 4; ++s) {
        const int k = 4 * h + s;
        for (size_t l = 0; l < 32; l += N) {
          const int sc = unpack_q3_k_scale(block.scales, 8 * h + 2 * s + static_cast<int>(l / 16)) - 32;
          const auto low = hn::And(hn::ShiftRightSame(hn::LoadU(du8, block.qs + 32 * h + l), 2 * s), three);
          const auto high = hn::And(hn::ShiftRightSame(hn::LoadU(du8, block.hmask + l), k), one);
          const auto q = hn::Sub(hn::PromoteTo(di32, hn::Or(low, hn::ShiftLeft<2>(high))), four);
          acc = hn::MulAdd(hn::Set(df, d * static_cast<float>(sc)),
                           hn::Mul(hn::ConvertTo(df, q), hn::LoadU(df, x + 128 * h + 32 * s + l)), acc);
        }
      }
    }
  }
  return reduce(df, acc);
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
    const float d = f16_scale(block.d);
    for (int64_t half = 0; half < 2; ++half) {
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

// Four f32 rows (row k at w + k * stride) against one x: x is loaded once per four FMAs,
// which is what bounds the prefill loop (the rows sit in L1, x streams from L2).
void DotF32Rows4(const float* w, int64_t stride, const float* x, int64_t n, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  const float *w0 = w, *w1 = w + stride, *w2 = w + 2 * stride, *w3 = w + 3 * stride;
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto xv = hn::LoadU(df, x + i);
    a0 = hn::MulAdd(hn::LoadU(df, w0 + i), xv, a0);
    a1 = hn::MulAdd(hn::LoadU(df, w1 + i), xv, a1);
    a2 = hn::MulAdd(hn::LoadU(df, w2 + i), xv, a2);
    a3 = hn::MulAdd(hn::LoadU(df, w3 + i), xv, a3);
  }
  out[0] = reduce(df, a0);
  out[1] = reduce(df, a1);
  out[2] = reduce(df, a2);
  out[3] = reduce(df, a3);
  for (; i < n; ++i) {
    out[0] += w0[i] * x[i];
    out[1] += w1[i] * x[i];
    out[2] += w2[i] * x[i];
    out[3] += w3[i] * x[i];
  }
}

// Four f32 rows against four x vectors (x_t at x + t * x_stride): out[t * 4 + k] =
// dot(row k, x_t). Sixteen accumulators, eight loads per sixteen FMAs — the prefill GEMM
// micro-kernel (rows in L1, the token block streaming from L2).
void DotF32Rows4x4(const float* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t n, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* wr[4] = {w, w + w_stride, w + 2 * w_stride, w + 3 * w_stride};
  const float* xr[4] = {x, x + x_stride, x + 2 * x_stride, x + 3 * x_stride};
  auto a00 = hn::Zero(df), a01 = hn::Zero(df), a02 = hn::Zero(df), a03 = hn::Zero(df);
  auto a10 = hn::Zero(df), a11 = hn::Zero(df), a12 = hn::Zero(df), a13 = hn::Zero(df);
  auto a20 = hn::Zero(df), a21 = hn::Zero(df), a22 = hn::Zero(df), a23 = hn::Zero(df);
  auto a30 = hn::Zero(df), a31 = hn::Zero(df), a32 = hn::Zero(df), a33 = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto w0 = hn::LoadU(df, wr[0] + i), w1 = hn::LoadU(df, wr[1] + i);
    const auto w2 = hn::LoadU(df, wr[2] + i), w3 = hn::LoadU(df, wr[3] + i);
    auto xv = hn::LoadU(df, xr[0] + i);
    a00 = hn::MulAdd(w0, xv, a00);
    a01 = hn::MulAdd(w1, xv, a01);
    a02 = hn::MulAdd(w2, xv, a02);
    a03 = hn::MulAdd(w3, xv, a03);
    xv = hn::LoadU(df, xr[1] + i);
    a10 = hn::MulAdd(w0, xv, a10);
    a11 = hn::MulAdd(w1, xv, a11);
    a12 = hn::MulAdd(w2, xv, a12);
    a13 = hn::MulAdd(w3, xv, a13);
    xv = hn::LoadU(df, xr[2] + i);
    a20 = hn::MulAdd(w0, xv, a20);
    a21 = hn::MulAdd(w1, xv, a21);
    a22 = hn::MulAdd(w2, xv, a22);
    a23 = hn::MulAdd(w3, xv, a23);
    xv = hn::LoadU(df, xr[3] + i);
    a30 = hn::MulAdd(w0, xv, a30);
    a31 = hn::MulAdd(w1, xv, a31);
    a32 = hn::MulAdd(w2, xv, a32);
    a33 = hn::MulAdd(w3, xv, a33);
  }
  const hn::Vec<DF> acc[16] = {a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33};
  for (int k = 0; k < 16; ++k) out[k] = reduce(df, acc[k]);
  for (; i < n; ++i) {
    for (int t = 0; t < 4; ++t) {
      for (int k = 0; k < 4; ++k) out[t * 4 + k] += wr[k][i] * xr[t][i];
    }
  }
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

// s[c] = sum_e q[e] * kt[e * ld + c] for c in [0, cols): keys stored transposed (one row
// per dimension), so each score is a lane and no horizontal reductions are needed. cols and
// ld are multiples of 4 vectors (callers pad).
void ScoresTransposed(const float* q, const float* kt, int64_t ld, int64_t d, int64_t cols, float* s) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t c = 0; c < cols; c += 4 * N) {
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (int64_t e = 0; e < d; ++e) {
      const auto qv = hn::Set(df, q[e]);
      const float* row = kt + e * ld + c;
      a0 = hn::MulAdd(qv, hn::LoadU(df, row), a0);
      a1 = hn::MulAdd(qv, hn::LoadU(df, row + N), a1);
      a2 = hn::MulAdd(qv, hn::LoadU(df, row + 2 * N), a2);
      a3 = hn::MulAdd(qv, hn::LoadU(df, row + 3 * N), a3);
    }
    hn::StoreU(a0, df, s + c);
    hn::StoreU(a1, df, s + c + N);
    hn::StoreU(a2, df, s + c + 2 * N);
    hn::StoreU(a3, df, s + c + 3 * N);
  }
}

// s[i] = exp(s[i] - shift) (Highway's Exp: <= 1 ulp, 0 below its range, so -inf gives 0);
// returns the sum. The softmax numerator of an attention tile.
float ExpShiftedSum(float* s, int64_t n, float shift) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, shift);
  auto sum = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, s + i), vs));
    hn::StoreU(e, df, s + i);
    sum = hn::Add(sum, e);
  }
  float total = reduce(df, sum);
  for (; i < n; ++i) {
    s[i] = std::exp(s[i] - shift);
    total += s[i];
  }
  return total;
}

void F16ToF32(const uint16_t* src, float* dst, int64_t n) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto* h = reinterpret_cast<const hwy::float16_t*>(src);
  int64_t i = 0;
  // Unrolled: a cached row of 64 f16 is 8 conversions, and loop control doubled their cost.
#pragma GCC unroll 4
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + i)), df, dst + i);
  for (; i < n; ++i) dst[i] = base::f16_to_f32(src[i]);
}

void BF16ToF32(const uint16_t* src, float* dst, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(load_bf16(df, src + i), df, dst + i);
  for (; i < n; ++i) dst[i] = base::bf16_to_f32(src[i]);
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
HWY_EXPORT(DotQ5_0);
HWY_EXPORT(DotQ5_K);
HWY_EXPORT(DotQ5_1);
HWY_EXPORT(DotIQ4_NL);
HWY_EXPORT(DotIQ4_XS);
HWY_EXPORT(DotQ2_K);
HWY_EXPORT(DotQ3_K);
HWY_EXPORT(DotF32Rows4);
HWY_EXPORT(DotF32Rows4x4);
HWY_EXPORT(AxpyF32);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(ExpShiftedSum);
HWY_EXPORT(ScoresTransposed);
HWY_EXPORT(BF16ToF32);
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
float dot_q5_0(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ5_0)(row, x, n); }
float dot_q5_k(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ5_K)(row, x, n); }
float dot_q5_1(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ5_1)(row, x, n); }
float dot_iq4_nl(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotIQ4_NL)(row, x, n); }
float dot_iq4_xs(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotIQ4_XS)(row, x, n); }
float dot_q2_k(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ2_K)(row, x, n); }
float dot_q3_k(const void* row, const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotQ3_K)(row, x, n); }
void dot_f32_rows4(const float* w, int64_t stride, const float* x, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotF32Rows4)(w, stride, x, n, out);
}
void scores_transposed(const float* q, const float* kt, int64_t ld, int64_t d, int64_t cols, float* s) {
  HWY_DYNAMIC_DISPATCH(ScoresTransposed)(q, kt, ld, d, cols, s);
}
float exp_shifted_sum(float* s, int64_t n, float shift) { return HWY_DYNAMIC_DISPATCH(ExpShiftedSum)(s, n, shift); }
void f16_to_f32(const uint16_t* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(F16ToF32)(src, dst, n); }
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(BF16ToF32)(src, dst, n); }
void dot_f32_rows4x4(const float* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotF32Rows4x4)(w, w_stride, x, x_stride, n, out);
}
void axpy_f32(float a, const float* v, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyF32)(a, v, out, n); }
void axpy_f16(float a, const uint16_t* v, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyF16)(a, v, out, n); }
void axpy_bf16(float a, const uint16_t* v, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyBF16)(a, v, out, n); }

}  // namespace lm::kernels::simd
#endif  // HWY_ONCE
