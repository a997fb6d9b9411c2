// Per-target helper (Highway -inl header: included once per SIMD target from inside a
// foreach_target translation unit): the 512-bit key scorers' reduction (byte_level_key_scores.cpp,
// even_byte_key_scores.cpp). Each row of 64 coordinates leaves one register of 16 int32 lanes
// per query, lane l holding the sum over elements 4l..4l+3 (vpdpbusd's layout): lanes 0-7 are
// block 0 (elements 0-31), 8-15 block 1. Eight rows reduce to their 16 block sums in three levels
// of unpacks and adds, then meet their f16 scales as the scalar references do: each block sum
// converted and multiplied by its scale, the two products added, one fma with step and bias.
#if defined(VELOXQUANT_ATTENTION_WIDE_BLOCK_SUMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VELOXQUANT_ATTENTION_WIDE_BLOCK_SUMS_INL_H_
#undef VELOXQUANT_ATTENTION_WIDE_BLOCK_SUMS_INL_H_
#else
#define VELOXQUANT_ATTENTION_WIDE_BLOCK_SUMS_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0's AVX3_DL target string names AVX-VNNI but not AVX512-VNNI, so the loops ask for it
// themselves and run only where the CPU reports it (every CPU with VBMI2 and BITALG does).
#ifndef VQ_WITH_AVX512_VNNI
#define VQ_WITH_AVX512_VNNI __attribute__((target("avx512vnni")))
#endif
HWY_INLINE bool has_avx512_vnni() {
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
}

// Two rows' lanes summed so each 128-bit quarter holds [a0+a2, b0+b2, a1+a3, b1+b3].
HWY_INLINE __m512i wide_pair_sums(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

// Two pair sums (rows a, b and c, d) to each quarter's four row sums [a, b, c, d].
HWY_INLINE __m512i wide_quad_sums(__m512i ab, __m512i cd) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

// Quad sums of rows 0-3 and 4-7 (quarters: elements 0-15, 16-31, 32-47, 48-63) to the block
// sums [rows 0-3 block 0, rows 0-3 block 1, rows 4-7 block 0, rows 4-7 block 1].
HWY_INLINE __m512i wide_block_sums(__m512i rows0_3, __m512i rows4_7) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(rows0_3, rows4_7, 0x88), _mm512_shuffle_i32x4(rows0_3, rows4_7, 0xdd));
}

// The f16 scales of rows j..j+live-1 (two per row, [r0b0, r0b1, r1b0, ...]) in the block sums'
// order; rows past the tile read nothing.
HWY_INLINE __m512 wide_block_scales(const uint16_t* scales, int64_t live_rows) {
  const __m512i order = _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  const auto live = static_cast<__mmask16>((1u << (2 * live_rows)) - 1);
  return _mm512_permutexvar_ps(order, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, scales)));
}

// scores[j] = fma(float(T_0) * s_0 + float(T_1) * s_1, step, add) for the live rows of eight.
HWY_INLINE void wide_store_scores(__m512i blocks, __m512 scale, __m256 step, __m256 add, int64_t live_rows,
                                  float* scores) {
  // Quarters [0, 2] then [1, 3]: block 0 and block 1 of rows 0-7, ready to add as halves.
  const __m512i halves = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
  const __m512 products = _mm512_permutexvar_ps(halves, _mm512_mul_ps(_mm512_cvtepi32_ps(blocks), scale));
  const __m256 acc = _mm256_add_ps(_mm512_castps512_ps256(products), _mm512_extractf32x8_ps(products, 1));
  const auto live = static_cast<__mmask8>((1u << live_rows) - 1);
  _mm256_mask_storeu_ps(scores, live, _mm256_fmadd_ps(acc, step, add));
}

// Eight rows a pass for NQ queries, the scorers' one loop: lanes(row, live, out) writes row
// `row`'s 16-lane sums for each query into out[NQ] (live false: a row past the tile, which must
// read nothing); store(r, block_sums, scale, j, live_rows) finishes query r's scores of rows
// j..j+live_rows-1 from the block sums and the rows' scales in the same order.
template <int NQ, class Lanes, class Store>
VQ_WITH_AVX512_VNNI HWY_INLINE void wide_row_passes(int64_t n_rows, const uint16_t* scales, const Lanes& lanes,
                                                    const Store& store) {
  for (int64_t j = 0; j < n_rows; j += 8) {
    const int64_t live_rows = std::min<int64_t>(8, n_rows - j);
    __m512i quads[NQ][2];
    for (int half = 0; half < 2; ++half) {
      __m512i pairs[NQ][2];
      for (int p = 0; p < 2; ++p) {
        const int64_t a = 4 * half + 2 * p;  // rows a, a + 1 of the pass
        __m512i first[NQ], second[NQ];
        lanes(j + a, a < live_rows, first);
        lanes(j + a + 1, a + 1 < live_rows, second);
        for (int r = 0; r < NQ; ++r) pairs[r][p] = wide_pair_sums(first[r], second[r]);
      }
      for (int r = 0; r < NQ; ++r) quads[r][half] = wide_quad_sums(pairs[r][0], pairs[r][1]);
    }
    const __m512 scale = wide_block_scales(scales + 2 * j, live_rows);
    for (int r = 0; r < NQ; ++r) store(r, wide_block_sums(quads[r][0], quads[r][1]), scale, j, live_rows);
  }
}

// Queries in units of three (a GQA group of SmolLM2 and Llama-3), then two or one:
// unit(NQ as an integral_constant, the unit's first query).
template <class Unit>
HWY_INLINE void wide_query_units(int64_t n_q, const Unit& unit) {
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) unit(std::integral_constant<int, 3>{}, r);
  if (n_q - r == 2) {
    unit(std::integral_constant<int, 2>{}, r);
  } else if (n_q - r == 1) {
    unit(std::integral_constant<int, 1>{}, r);
  }
}
#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
