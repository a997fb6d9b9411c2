// Per-target helper (Highway -inl header: included once per SIMD target from inside a
// foreach_target translation unit): acc + a * b as one fused multiply-add where the target has
// FMA (AVX2, AVX3), a multiply then an add elsewhere. curdkv's Gram (upper_gram.cpp) and subspace
// energy (leverage_kernels.cpp) are bound by these instructions, half as many fused; both files
// are built with -ffp-contract=off, so the unfused form stays two roundings, and each file's
// *_fuses() says which form the dispatched target uses (its scalar reference then matches).
#if defined(VELOXQUANT_EVICTION_FUSED_TERM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VELOXQUANT_EVICTION_FUSED_TERM_INL_H_
#undef VELOXQUANT_EVICTION_FUSED_TERM_INL_H_
#else
#define VELOXQUANT_EVICTION_FUSED_TERM_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::eviction::HWY_NAMESPACE {

template <class V>
HWY_INLINE V fused_term(V a, V b, V acc) {
#if HWY_NATIVE_FMA
  return hwy::HWY_NAMESPACE::MulAdd(a, b, acc);
#else
  return hwy::HWY_NAMESPACE::Add(acc, hwy::HWY_NAMESPACE::Mul(a, b));
#endif
}

}  // namespace veloxquant::eviction::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // VELOXQUANT_EVICTION_FUSED_TERM_INL_H_
