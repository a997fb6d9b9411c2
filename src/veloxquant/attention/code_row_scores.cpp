// Kernels for code_row_scores.h: the AVX3_DL target (VNNI's vpdpwssd) has its own loop, every
// other target the scalar one (the sums are exact integers, so all give the same scores).
// Compiled with -ffp-contract=off: the final multiply and add round apart, as the header says.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/code_row_scores.cpp"
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/code_row_scores.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0's AVX3_DL target attribute leaves VNNI out: the functions that use it ask for it.
#ifndef VQ_CODE_ROWS_VNNI
#define VQ_CODE_ROWS_VNNI __attribute__((target("avx512vnni")))
#endif
// Lane k of the result = sum of the 16 lanes of v[k], for 16 vectors: pairs of 32-bit lanes,
// then 64-bit, then 128-bit blocks added (45 instructions for 16 sums).
HWY_INLINE __m512i sum16(const __m512i* v) {
  __m512i t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i) {
    t[i] =
        _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    u[i] =
        _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]), _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  }
  // u[i]: block b, lane k = block b's part of v[4i + k].
  for (int i = 0; i < 2; ++i) {
    w[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], 0x88),
                            _mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], 0xDD));
  }
  // w[i]: blocks [v(8i..8i+3) half, v(8i..8i+3) other half, v(8i+4..8i+7) half, other half].
  return _mm512_add_epi32(_mm512_shuffle_i32x4(w[0], w[1], 0x88), _mm512_shuffle_i32x4(w[0], w[1], 0xDD));
}

// ROWS rows x NQ queries (ROWS * NQ = 16) from row j: accumulator q * ROWS + r; each code
// vector is loaded once for the NQ queries.
template <int ROWS, int NQ>
VQ_CODE_ROWS_VNNI HWY_INLINE void score_block(const float* prepared, int64_t prepared_stride, const int16_t* codes,
                                              int64_t code_stride, int64_t j, float* scores, int64_t ld) {
  __m512i acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = _mm512_setzero_si512();
  const int16_t* a[NQ];
  for (int q = 0; q < NQ; ++q) a[q] = reinterpret_cast<const int16_t*>(prepared + q * prepared_stride + 2);
  for (int64_t c = 0; c < code_stride; c += 32) {
    for (int r = 0; r < ROWS; ++r) {
      const __m512i x = _mm512_loadu_si512(codes + (j + r) * code_stride + c);
      for (int q = 0; q < NQ; ++q)
        acc[q * ROWS + r] = _mm512_dpwssd_epi32(acc[q * ROWS + r], x, _mm512_loadu_si512(a[q] + c));
    }
  }
  const __m512 sums = _mm512_cvtepi32_ps(sum16(acc));
  alignas(64) float s[16];
  _mm512_store_ps(s, sums);
  for (int q = 0; q < NQ; ++q) {
    const float scale = prepared[q * prepared_stride], offset = prepared[q * prepared_stride + 1];
    for (int r = 0; r < ROWS; ++r) scores[q * ld + j + r] = s[q * ROWS + r] * scale + offset;
  }
}

// Q queries (prepared, scores: their first row) against every row: R rows a block, the last
// rows by the scalar reference.
template <int R, int Q>
VQ_CODE_ROWS_VNNI void score_query_block(const float* prepared, int64_t prepared_stride, const int16_t* codes,
                                         int64_t code_stride, int64_t n_rows, float* scores, int64_t ld) {
  int64_t j = 0;
  for (; j + R <= n_rows; j += R) score_block<R, Q>(prepared, prepared_stride, codes, code_stride, j, scores, ld);
  if (j < n_rows) {
    scalar::score_code_rows(prepared, prepared_stride, Q, codes + j * code_stride, code_stride, n_rows - j, scores + j,
                            ld);
  }
}

VQ_CODE_ROWS_VNNI void score_rows_vnni(const float* prepared, int64_t prepared_stride, int64_t n_q,
                                       const int16_t* codes, int64_t code_stride, int64_t n_rows, float* scores,
                                       int64_t ld) {
  int64_t q = 0;
  for (; q + 4 <= n_q; q += 4) {
    score_query_block<4, 4>(prepared + q * prepared_stride, prepared_stride, codes, code_stride, n_rows,
                            scores + q * ld, ld);
  }
  for (; q < n_q; ++q) {
    score_query_block<16, 1>(prepared + q * prepared_stride, prepared_stride, codes, code_stride, n_rows,
                             scores + q * ld, ld);
  }
}
#endif

void ScoreCodeRowsImpl(const float* prepared, int64_t prepared_stride, int64_t n_q, const int16_t* codes,
                       int64_t code_stride, int64_t n_rows, float* scores, int64_t ld) {
#if HWY_TARGET == HWY_AVX3_DL
  score_rows_vnni(prepared, prepared_stride, n_q, codes, code_stride, n_rows, scores, ld);
#else
  scalar::score_code_rows(prepared, prepared_stride, n_q, codes, code_stride, n_rows, scores, ld);
#endif
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(ScoreCodeRowsImpl);

void prepare_code_query(const float* projected, const float* step, const float* lo, int64_t r, int64_t code_stride,
                        float* prepared) {
  double offset = 0.0;
  float largest = 0.0f;
  for (int64_t i = 0; i < r; ++i) {
    offset += static_cast<double>(projected[i]) * lo[i];
    largest = std::max(largest, std::fabs(projected[i] * step[i]));
  }
  // The int32 sums stay exact: |a_i| <= limit and codes <= 255 over code_stride terms.
  const double limit = std::min(32767.0, std::floor(2147483647.0 / (255.0 * static_cast<double>(code_stride))));
  const float scale = largest > 0.0f ? static_cast<float>(largest / limit) : 0.0f;
  int16_t a[4096];
  int16_t* dst = code_stride <= 4096 ? a : nullptr;
  std::vector<int16_t> wide;
  if (!dst) {
    wide.assign(static_cast<std::size_t>(code_stride), 0);
    dst = wide.data();
  }
  for (int64_t i = 0; i < code_stride; ++i) {
    const float v = i < r && scale > 0.0f ? projected[i] * step[i] / scale : 0.0f;
    dst[i] = static_cast<int16_t>(std::clamp(std::lrint(v), -static_cast<long>(limit), static_cast<long>(limit)));
  }
  prepared[0] = scale;
  prepared[1] = static_cast<float>(offset);
  std::memcpy(prepared + 2, dst, static_cast<std::size_t>(code_stride) * sizeof(int16_t));
}

void score_code_rows(const float* prepared, int64_t prepared_stride, int64_t n_q, const int16_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreCodeRowsImpl)(prepared, prepared_stride, n_q, codes, code_stride, n_rows, scores, ld);
}

namespace scalar {
void score_code_rows(const float* prepared, int64_t prepared_stride, int64_t n_q, const int16_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld) {
  for (int64_t q = 0; q < n_q; ++q) {
    const float* p = prepared + q * prepared_stride;
    int16_t a[32];
    for (int64_t j = 0; j < n_rows; ++j) {
      int32_t sum = 0;
      for (int64_t c = 0; c < code_stride; c += 32) {
        std::memcpy(a, p + 2 + c / 2, sizeof(a));
        for (int k = 0; k < 32; ++k) sum += int32_t{a[k]} * codes[j * code_stride + c + k];
      }
      const float s = static_cast<float>(sum);
      scores[q * ld + j] = s * p[0] + p[1];
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
