// Highway's foreach_target re-includes this file once per SIMD target; HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled target on first call. Compiled with
// -ffp-contract=off (src/lm/CMakeLists.txt): a product and a sum fused into one FMA would
// round differently from the scalar references these must equal bit for bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/simd_dequantize.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "lm/kernels/iq4_values-inl.h"

#include <cstring>

#include "lm/kernels/simd_dequantize.h"
#include "lm/weights/block_formats.h"
#include "lm/weights/dequantize.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 f32 lanes: every sub-block (16 or 32 elements) is a whole number of vectors.
using DF = hn::CappedTag<float, 16>;
using DI32 = hn::Rebind<int32_t, DF>;
using DU32 = hn::Rebind<uint32_t, DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DI8 = hn::Rebind<int8_t, DF>;

HWY_INLINE float f16_scale(uint16_t bits) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  hwy::float16_t h[1];
  std::memcpy(h, &bits, sizeof bits);
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, h)));
}

// N codes (bytes) widened to i32 lanes, where x86 shifts natively.
HWY_INLINE hn::Vec<DI32> load_codes(const uint8_t* p) { return hn::PromoteTo(DI32(), hn::LoadU(DU8(), p)); }

// The fifth bits of elements j .. j+N of a Q5_0 / Q5_1 block (bit i of the qh word), as 16 or 0.
HWY_INLINE hn::Vec<DI32> q5_high(uint32_t qh, size_t j) {
  const DU32 du32;
  const auto bits = hn::Shr(hn::Set(du32, qh), hn::Iota(du32, static_cast<uint32_t>(j)));
  return hn::BitCast(DI32(), hn::ShiftLeft<4>(hn::And(bits, hn::Set(du32, 1u))));
}

// Writes y = scale * value (+ offset) for 32 codes of a Q5_0 / Q5_1 block.
template <bool kOffset>
HWY_INLINE void q5_block(const uint8_t* qs, uint32_t qh, float d, float m, int32_t bias, float* y) {
  const DF df;
  const DI32 di32;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di32, 0x0f);
  const auto vb = hn::Set(di32, bias);
  const auto vd = hn::Set(df, d), vm = hn::Set(df, m);
  for (size_t j = 0; j < 16; j += N) {
    const auto q = load_codes(qs + j);
    const auto q0 = hn::Sub(hn::Or(hn::And(q, mask), q5_high(qh, j)), vb);
    const auto q1 = hn::Sub(hn::Or(hn::ShiftRight<4>(q), q5_high(qh, j + 16)), vb);
    auto y0 = hn::Mul(vd, hn::ConvertTo(df, q0));
    auto y1 = hn::Mul(vd, hn::ConvertTo(df, q1));
    if constexpr (kOffset) {
      y0 = hn::Add(y0, vm);
      y1 = hn::Add(y1, vm);
    }
    hn::StoreU(y0, df, y + j);
    hn::StoreU(y1, df, y + 16 + j);
  }
}

void DequantizeQ5_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    q5_block<false>(blocks[b].qs, qh, f16_scale(blocks[b].d), 0.0f, 16, dst + b * kQK5_0);
  }
}

void DequantizeQ5_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, sizeof qh);
    q5_block<true>(blocks[b].qs, qh, f16_scale(blocks[b].d), f16_scale(blocks[b].m), 0, dst + b * kQK5_1);
  }
}

// Sub-block j: dl * code - ml, code = nibble j%2 of qs[32(j/2) + l] | bit j of qh[l] << 4.
void DequantizeQ5_K(const void* src, float* dst, int64_t n) {
  const DF df;
  const DI32 di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  const auto mask = hn::Set(di32, 0x0f), one = hn::Set(di32, 1);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    float* y = dst + b * kQK_K;
    for (int64_t j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      unpack_q4_k_scale(block.scales, j, sc, mn);
      const auto dl = hn::Set(df, d * static_cast<float>(sc)), ml = hn::Set(df, dmin * static_cast<float>(mn));
      const uint8_t* q = block.qs + 32 * (j / 2);
      for (size_t l = 0; l < 32; l += N) {
        const auto low = hn::And(hn::ShiftRightSame(load_codes(q + l), 4 * (j % 2)), mask);
        const auto high = hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(load_codes(block.qh + l), j), one));
        hn::StoreU(hn::Sub(hn::Mul(dl, hn::ConvertTo(df, hn::Or(low, high))), ml), df, y + 32 * j + l);
      }
    }
  }
}

// Element 128h + 32s + l: bits 2s of qs[32h + l]; sub-block 8h + 2s + l/16 (N divides 16).
void DequantizeQ2_K(const void* src, float* dst, int64_t n) {
  const DF df;
  const DI32 di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  const auto three = hn::Set(di32, 3);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    float* y = dst + b * kQK_K;
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t s = 0; s < 4; ++s) {
        for (size_t l = 0; l < 32; l += N) {
          const uint8_t sc = block.scales[8 * h + 2 * s + static_cast<int>(l / 16)];
          const auto dl = hn::Set(df, d * static_cast<float>(sc & 0x0f));
          const auto ml = hn::Set(df, dmin * static_cast<float>(sc >> 4));
          const auto q = hn::And(hn::ShiftRightSame(load_codes(block.qs + 32 * h + l), 2 * s), three);
          hn::StoreU(hn::Sub(hn::Mul(dl, hn::ConvertTo(df, q)), ml), df, y + 128 * h + 32 * s + l);
        }
      }
    }
  }
}

// As Q2_K, q = (low | bit 4h+s of hmask[l] << 2) - 4, scale d * (sc - 32).
void DequantizeQ3_K(const void* src, float* dst, int64_t n) {
  const DF df;
  const DI32 di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ3_K*>(src);
  const auto three = hn::Set(di32, 3), one = hn::Set(di32, 1), four = hn::Set(di32, 4);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& block = blocks[b];
    const float d = f16_scale(block.d);
    float* y = dst + b * kQK_K;
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t s = 0; s < 4; ++s) {
        const int k = 4 * h + s;
        for (size_t l = 0; l < 32; l += N) {
          const int sc = unpack_q3_k_scale(block.scales, 8 * h + 2 * s + static_cast<int>(l / 16)) - 32;
          const auto dl = hn::Set(df, d * static_cast<float>(sc));
          const auto low = hn::And(hn::ShiftRightSame(load_codes(block.qs + 32 * h + l), 2 * s), three);
          const auto high = hn::ShiftLeft<2>(hn::And(hn::ShiftRightSame(load_codes(block.hmask + l), k), one));
          hn::StoreU(hn::Mul(dl, hn::ConvertTo(df, hn::Sub(hn::Or(low, high), four))), df, y + 128 * h + 32 * s + l);
        }
      }
    }
  }
}

HWY_INLINE void iq4_scaled(const uint8_t* qs, float scale, float* y) {
  const DF df;
  const size_t N = hn::Lanes(df);
  alignas(16) int8_t values[32];
  iq4_values(qs, values);
  const auto vs = hn::Set(df, scale);
  for (size_t j = 0; j < 32; j += N) {
    hn::StoreU(hn::Mul(vs, hn::ConvertTo(df, hn::PromoteTo(DI32(), hn::LoadU(DI8(), values + j)))), df, y + j);
  }
}

void DequantizeIQ4_NL(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kQK4_NL; ++b) iq4_scaled(blocks[b].qs, f16_scale(blocks[b].d), dst + b * kQK4_NL);
}

void DequantizeIQ4_XS(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& block = blocks[b];
    const float d = f16_scale(block.d);
    for (int64_t j = 0; j < 8; ++j) {
      iq4_scaled(block.qs + 16 * j, d * static_cast<float>(unpack_iq4_xs_scale(block, j) - 32),
                 dst + b * kQK_K + 32 * j);
    }
  }
}

// Q4_0 / Q4_1: 32 nibbles (low: elements 0..15, high: 16..31); y = d * (q - bias) (+ m).
template <bool kOffset>
HWY_INLINE void q4_block(const uint8_t* qs, float d, float m, int32_t bias, float* y) {
  const DF df;
  const DI32 di32;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di32, 0x0f);
  const auto vb = hn::Set(di32, bias);
  const auto vd = hn::Set(df, d), vm = hn::Set(df, m);
  for (size_t j = 0; j < 16; j += N) {
    const auto q = load_codes(qs + j);
    auto y0 = hn::Mul(vd, hn::ConvertTo(df, hn::Sub(hn::And(q, mask), vb)));
    auto y1 = hn::Mul(vd, hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(q), vb)));
    if constexpr (kOffset) {
      y0 = hn::Add(y0, vm);
      y1 = hn::Add(y1, vm);
    }
    hn::StoreU(y0, df, y + j);
    hn::StoreU(y1, df, y + 16 + j);
  }
}

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK4_0; ++b)
    q4_block<false>(blocks[b].qs, f16_scale(blocks[b].d), 0.0f, 8, dst + b * kQK4_0);
}

void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    q4_block<true>(blocks[b].qs, f16_scale(blocks[b].d), f16_scale(blocks[b].m), 0, dst + b * kQK4_1);
  }
}

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const auto vd = hn::Set(df, f16_scale(blocks[b].d));
    for (size_t j = 0; j < 32; j += N) {
      const auto q = hn::PromoteTo(DI32(), hn::LoadU(DI8(), blocks[b].qs + j));
      hn::StoreU(hn::Mul(vd, hn::ConvertTo(df, q)), df, dst + b * kQK8_0 + j);
    }
  }
}

// Sub-block j: d*sc_j * q - dmin*mn_j, q = nibble j%2 of qs[32(j/2) + l].
void DequantizeQ4_K(const void* src, float* dst, int64_t n) {
  const DF df;
  const DI32 di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  const auto mask = hn::Set(di32, 0x0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& block = blocks[b];
    const float d = f16_scale(block.d), dmin = f16_scale(block.dmin);
    float* y = dst + b * kQK_K;
    for (int64_t j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      unpack_q4_k_scale(block.scales, j, sc, mn);
      const auto dl = hn::Set(df, d * sc), ml = hn::Set(df, dmin * mn);
      const uint8_t* q = block.qs + 32 * (j / 2);
      for (size_t l = 0; l < 32; l += N) {
        const auto code = hn::And(hn::ShiftRightSame(load_codes(q + l), 4 * (j % 2)), mask);
        hn::StoreU(hn::Sub(hn::Mul(dl, hn::ConvertTo(df, code)), ml), df, y + 32 * j + l);
      }
    }
  }
}

// Q6_K: element 32k + l of each half: low four bits from ql[l + 32(k&1)] (nibble k>>1), high
// two from bits 2k of qh[l], scale sc[l/16 + 2k]; y = d * (sc * (q - 32)) as the reference.
void DequantizeQ6_K(const void* src, float* dst, int64_t n) {
  const DF df;
  const DI32 di32;
  const size_t N = hn::Lanes(df);
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  const auto low4 = hn::Set(di32, 0x0f), low2 = hn::Set(di32, 0x03), bias = hn::Set(di32, 32);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& block = blocks[b];
    const auto vd = hn::Set(df, f16_scale(block.d));
    for (int64_t half = 0; half < 2; ++half) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      const int8_t* sc = block.scales + 8 * half;
      float* y = dst + b * kQK_K + 128 * half;
      for (int64_t k = 0; k < 4; ++k) {
        for (size_t l = 0; l < 32; l += N) {
          const auto lo = hn::And(hn::ShiftRightSame(load_codes(ql + l + 32 * (k & 1)), 4 * (k >> 1)), low4);
          const auto hi = hn::And(hn::ShiftRightSame(load_codes(qh + l), 2 * k), low2);
          const auto q = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), bias);
          const auto scaled = hn::Mul(q, hn::Set(di32, sc[static_cast<int>(l / 16) + 2 * k]));
          hn::StoreU(hn::Mul(vd, hn::ConvertTo(df, scaled)), df, y + 32 * k + l);
        }
      }
    }
  }
}

bool DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::Q4_0:
      DequantizeQ4_0(src, dst, n);
      return true;
    case GgmlType::Q4_1:
      DequantizeQ4_1(src, dst, n);
      return true;
    case GgmlType::Q8_0:
      DequantizeQ8_0(src, dst, n);
      return true;
    case GgmlType::Q4_K:
      DequantizeQ4_K(src, dst, n);
      return true;
    case GgmlType::Q6_K:
      DequantizeQ6_K(src, dst, n);
      return true;
    case GgmlType::Q5_0:
      DequantizeQ5_0(src, dst, n);
      return true;
    case GgmlType::Q5_1:
      DequantizeQ5_1(src, dst, n);
      return true;
    case GgmlType::Q5_K:
      DequantizeQ5_K(src, dst, n);
      return true;
    case GgmlType::Q2_K:
      DequantizeQ2_K(src, dst, n);
      return true;
    case GgmlType::Q3_K:
      DequantizeQ3_K(src, dst, n);
      return true;
    case GgmlType::IQ4_NL:
      DequantizeIQ4_NL(src, dst, n);
      return true;
    case GgmlType::IQ4_XS:
      DequantizeIQ4_XS(src, dst, n);
      return true;
    default:
      return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lm::kernels {

namespace simd {
HWY_EXPORT(DequantizeRow);

// The dispatch sits in the namespace of its export: with static dispatch only (scripts/lint.sh
// parses kernels with HWY_COMPILE_ONLY_STATIC) HWY_DYNAMIC_DISPATCH(simd::DequantizeRow) becomes
// N_<target>::simd::DequantizeRow, which does not exist; unqualified, from here, it resolves.
void dequantize_row_simd(GgmlType type, const void* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DequantizeRow)(type, src, dst, n);
}
}  // namespace simd

bool has_simd_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q5_K:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

void dequantize_row_fast(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeInfo info = ggml_type_info(type);
  // Argument checks (and the error for an unsupported type) stay with the reference.
  if (!has_simd_dequantize(type) || n < 0 || n % info.block_size != 0) return dequantize_row(type, src, dst, n);
  simd::dequantize_row_simd(type, src, dst, n);
}

}  // namespace lm::kernels
#endif  // HWY_ONCE
