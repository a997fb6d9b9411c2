// Per-target helper (Highway -inl header: included once per SIMD target from inside a
// foreach_target translation unit): the 512-bit form of the f32 tile scorers' reduction
// (lm/kernels/attention_tiles.h ScoreRows' sum_quads), shared by latent_tiles.cpp and
// latent_pair_tiles.cpp. Two rounds of interleaves and adds within each 128-bit block: lane i of
// each block ends as that block's sum of a_i's four lanes, ((x0 + x2) + (x1 + x3)), exactly as
// the block of an 8-lane vector would.
#if defined(VELOXQUANT_ATTENTION_SUM_QUADS512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VELOXQUANT_ATTENTION_SUM_QUADS512_INL_H_
#undef VELOXQUANT_ATTENTION_SUM_QUADS512_INL_H_
#else
#define VELOXQUANT_ATTENTION_SUM_QUADS512_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
HWY_INLINE __m512 sum_quads512(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const auto pair = [](__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
  };
  const auto quad = [](__m512 x, __m512 y) {
    const __m512d x64 = _mm512_castps_pd(x), y64 = _mm512_castps_pd(y);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x64, y64)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x64, y64)));
  };
  return quad(pair(a0, a1), pair(a2, a3));
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // VELOXQUANT_ATTENTION_SUM_QUADS512_INL_H_
