// 512-bit block sums for the I16-activation dot products (simd_dot_i16.cpp) on AVX-512 targets.
// The kernels there keep 16 i16 lanes (256 bits) per vector: one half of an activation block,
// which needs two multiply-adds, two accumulations and a transposition share per weight block.
// Here two weight blocks share each 512-bit multiply-add (block k in the low 256 bits, block k+4
// in the high), so eight blocks' whole sums come out of four vector pairs and one transposition.
// Integer sums are exact: these give exactly the lanes of the 256-bit route, so the results of
// the kernels using them are bit-identical to the narrower targets' (up to f32 accumulation,
// which is unchanged).
//
// Highway's -inl.h convention: included once per target from a file that re-includes itself
// through foreach_target, hence the toggling include guard instead of #pragma once.
#if defined(LM_KERNELS_I16_WIDE_BLOCKS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LM_KERNELS_I16_WIDE_BLOCKS_INL_H_
#undef LM_KERNELS_I16_WIDE_BLOCKS_INL_H_
#else
#define LM_KERNELS_I16_WIDE_BLOCKS_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd {
namespace HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

// Low 256 bits from `lo`, high 256 from `hi` (unaligned loads).
HWY_INLINE __m512i load_halves(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// Two Q4 blocks (16 code bytes each: low nibbles elements 0..15, high nibbles 16..31) times
// their activation blocks: i32 lanes 0..7 hold partial sums of block a, 8..15 of block b.
HWY_INLINE __m512i q4_pair_sums(const uint8_t* qs_a, const uint8_t* qs_b, const int16_t* x_a, const int16_t* x_b) {
  const __m256i bytes =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs_a))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs_b)), 1);
  const __m512i q = _mm512_cvtepu8_epi16(bytes);
  const __m512i lo = _mm512_and_si512(q, _mm512_set1_epi16(0x0f));
  const __m512i hi = _mm512_srli_epi16(q, 4);  // (widened bytes: no mask needed)
  return _mm512_add_epi32(_mm512_madd_epi16(lo, load_halves(x_a, x_b)),
                          _mm512_madd_epi16(hi, load_halves(x_a + 16, x_b + 16)));
}

// Two Q8_0 blocks (32 signed codes each) times their activation blocks, laid out as
// q4_pair_sums: each block is one 512-bit multiply-add with its whole activation block, then
// the two blocks' 256-bit halves are folded together (lanes 0..7 block a, 8..15 block b).
HWY_INLINE __m512i q8_pair_sums(const int8_t* qs_a, const int8_t* qs_b, const int16_t* x_a, const int16_t* x_b) {
  const __m512i a = _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs_a))),
                                      _mm512_loadu_si512(x_a));
  const __m512i b = _mm512_madd_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs_b))),
                                      _mm512_loadu_si512(x_b));
  // [a.q0 a.q1 b.q0 b.q1] + [a.q2 a.q3 b.q2 b.q3] (128-bit quarters).
  return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xEE));
}

// The whole sums of eight blocks, lane j = block j, from four pair vectors holding blocks
// (0, 4), (1, 5), (2, 6), (3, 7): per 128-bit quarter an interleave-and-add transposition
// gives [sum a, sum b, sum c, sum d] over that quarter's lanes; quarters 0 + 1 are blocks
// 0..3, quarters 2 + 3 blocks 4..7.
HWY_INLINE __m256i totals_of_8(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  const __m512i quarters = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  // [q0 q2 | q1 q3] (shuffle_i32x4 picks quarters 0, 2 of the first source, 1, 3 of the second).
  const __m512i even_odd = _mm512_shuffle_i32x4(quarters, quarters, 0xD8);
  return _mm256_add_epi32(_mm512_castsi512_si256(even_odd), _mm512_extracti64x4_epi64(even_odd, 1));
}

// The first 32-bit word of each of eight 20-byte blocks (Q4_1: the f16 scale, then the f16
// minimum), one per i32 lane: two 64-byte loads (blocks 0..3 and 4..7 each start within one)
// and one two-source permutation, instead of eight scalar loads and inserts.
HWY_INLINE __m256i q4_1_scale_words(const uint8_t* first) {
  static_assert(sizeof(BlockQ4_1) == 20);
  const __m512i blocks_0_3 = _mm512_loadu_si512(first);
  const __m512i blocks_4_7 = _mm512_loadu_si512(first + 4 * sizeof(BlockQ4_1));
  // Dword 5j of the first source (byte 20j), then dword 5j of the second (index 16 + 5j).
  const __m512i index = _mm512_setr_epi32(0, 5, 10, 15, 16, 21, 26, 31, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutex2var_epi32(blocks_0_3, index, blocks_4_7));
}

#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
