// The IQ4_NL / IQ4_XS codebook lookup shared by the SIMD kernels (simd_dot.cpp,
// simd_dot_i16.cpp, simd_dequantize.cpp). Highway's -inl.h convention: included once per
// target from a file that re-includes itself through foreach_target, hence the toggling
// include guard instead of #pragma once.
#if defined(LM_KERNELS_IQ4_VALUES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LM_KERNELS_IQ4_VALUES_INL_H_
#undef LM_KERNELS_IQ4_VALUES_INL_H_
#else
#define LM_KERNELS_IQ4_VALUES_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

#include "lm/weights/block_formats.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd {
namespace HWY_NAMESPACE {

// The codebook values of one IQ4 group of 32 codes (16 bytes: low nibbles elements 0..15,
// high nibbles 16..31) into out[32]: one byte shuffle per 16 codes (pshufb on x86).
HWY_INLINE void iq4_values(const uint8_t* qs, int8_t* out) {
#if HWY_TARGET == HWY_SCALAR
  for (int j = 0; j < 16; ++j) {
    out[j] = kIQ4Values[qs[j] & 0x0f];
    out[j + 16] = kIQ4Values[qs[j] >> 4];
  }
#else
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::Full128<uint8_t> d8;
  const hn::Full128<int8_t> di8;
  const auto table = hn::LoadU(di8, kIQ4Values);
  const auto v = hn::LoadU(d8, qs);
  hn::StoreU(hn::TableLookupBytes(table, hn::BitCast(di8, hn::And(v, hn::Set(d8, 0x0f)))), di8, out);
  hn::StoreU(hn::TableLookupBytes(table, hn::BitCast(di8, hn::ShiftRight<4>(v))), di8, out + 16);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::simd
HWY_AFTER_NAMESPACE();

#endif  // LM_KERNELS_IQ4_VALUES_INL_H_
