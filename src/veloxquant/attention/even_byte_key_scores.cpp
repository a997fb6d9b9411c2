// Highway-dispatched kernels for even_byte_key_scores.h: the SIMD loop needs AVX-512 VBMI and
// VNNI (the AVX3_DL target, which Highway 1.0 compiles only on request: hence the define, before
// any Highway header); every other target reports no support and callers keep
// block_level_key_scores.h.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/even_byte_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/even_byte_key_scores.h"
#include "veloxquant/attention/wide_block_sums-inl.h"

#include <algorithm>
#include <cmath>

#include "base/half.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL
bool EvenByteKeysSupportedImpl() { return has_avx512_vnni(); }

// The query's 64 int16 values as their low bytes ql = (int8) q16 and high bytes
// qh = (q16 - ql) / 256, so q16 = 256 qh + ql with both in int8 (|q16| <= kEvenByteQueryLimit).
struct SplitQuery {
  __m512i high, low;
};
HWY_INLINE SplitQuery split_query(const int16_t* q16) {
  __m256i high[2], low[2];
  for (int h = 0; h < 2; ++h) {
    const __m512i q = _mm512_loadu_si512(q16 + 32 * h);
    const __m512i low_signed = _mm512_srai_epi16(_mm512_slli_epi16(q, 8), 8);
    low[h] = _mm512_cvtepi16_epi8(low_signed);
    high[h] = _mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_sub_epi16(q, low_signed), 8));
  }
  return {_mm512_inserti64x4(_mm512_castsi256_si512(high[0]), high[1], 1),
          _mm512_inserti64x4(_mm512_castsi256_si512(low[0]), low[1], 1)};
}

// Row j's 16 lanes of sum q16 * c over four elements each: 256 * (codes . qh) + codes . ql.
VQ_WITH_AVX512_VNNI HWY_INLINE __m512i row_lanes(__m512i codes, const SplitQuery& q) {
  const __m512i high = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, q.high);
  return _mm512_dpbusd_epi32(_mm512_slli_epi32(high, 8), codes, q.low);
}

template <int NQ>
VQ_WITH_AVX512_VNNI void score_units(const BlockLevelKeys& k, const int16_t* q16, const float* q_step,
                                     const float* bias, float* scores, int64_t ld) {
  constexpr int64_t kDim = 64;
  SplitQuery q[NQ];
  __m512i block_total[NQ];  // 255 * (sum of q16 over the block), in the block sums' order
  __m256 step[NQ], add[NQ];
  for (int r = 0; r < NQ; ++r) {
    const int16_t* qr = q16 + r * kDim;
    q[r] = split_query(qr);
    int32_t first = 0, second = 0;
    for (int e = 0; e < 32; ++e) first += qr[e];
    for (int e = 32; e < 64; ++e) second += qr[e];
    const __m128i f = _mm_set1_epi32(255 * first), s = _mm_set1_epi32(255 * second);
    block_total[r] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(s, f)), _mm256_set_m128i(s, f), 1);
    step[r] = _mm256_set1_ps(q_step[r] * (1.0f / 256.0f));
    add[r] = _mm256_set1_ps(bias != nullptr ? bias[r] : 0.0f);
  }
  const int64_t stride = k.code_stride;
  wide_row_passes<NQ>(
      k.n_rows, k.scales,
      [&](int64_t row, bool live, __m512i* out) HWY_ATTR VQ_WITH_AVX512_VNNI {
        const __m512i codes = _mm512_maskz_loadu_epi8(live ? ~__mmask64{0} : 0, k.codes + row * stride);
        for (int r = 0; r < NQ; ++r) out[r] = row_lanes(codes, q[r]);
      },
      [&](int r, __m512i sums, __m512 scale, int64_t j, int64_t live_rows) HWY_ATTR {
        // T_b = 2 R_b - 255 * (the block's query sum)
        const __m512i totals = _mm512_sub_epi32(_mm512_slli_epi32(sums, 1), block_total[r]);
        wide_store_scores(totals, scale, step[r], add[r], live_rows, scores + r * ld + j);
      });
}

VQ_WITH_AVX512_VNNI void ScoreEvenBytesImpl(const BlockLevelKeys& k, const int16_t* q16, const float* q_step,
                                            const float* bias, int64_t n_q, float* scores, int64_t ld) {
  if (k.n_rows <= 0 || n_q <= 0) return;
  if (k.dim != 64 || k.block != 32 || k.bits != 8 || !has_avx512_vnni()) {
    return scalar::score_even_byte_rows(k, q16, q_step, bias, n_q, scores, ld);
  }
  wide_query_units(n_q, [&](auto nq, int64_t r) HWY_ATTR VQ_WITH_AVX512_VNNI {
    score_units<decltype(nq)::value>(k, q16 + r * 64, q_step + r, bias != nullptr ? bias + r : nullptr, scores + r * ld,
                                     ld);
  });
}
#else
bool EvenByteKeysSupportedImpl() { return false; }
void ScoreEvenBytesImpl(const BlockLevelKeys& k, const int16_t* q16, const float* q_step, const float* bias,
                        int64_t n_q, float* scores, int64_t ld) {
  scalar::score_even_byte_rows(k, q16, q_step, bias, n_q, scores, ld);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(EvenByteKeysSupportedImpl);
HWY_EXPORT(ScoreEvenBytesImpl);

bool can_score_even_byte_rows(int bits, int64_t dim, int64_t block) {
  static const bool supported = HWY_DYNAMIC_DISPATCH(EvenByteKeysSupportedImpl)();
  return supported && bits == 8 && dim == 64 && block == 32;
}

void score_even_byte_rows(const BlockLevelKeys& keys, const int16_t* q16, const float* q_step, const float* bias,
                          int64_t n_q, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreEvenBytesImpl)(keys, q16, q_step, bias, n_q, scores, ld);
}

namespace scalar {
void score_even_byte_rows(const BlockLevelKeys& k, const int16_t* q16, const float* q_step, const float* bias,
                          int64_t n_q, float* scores, int64_t ld) {
  const int64_t nb = k.dim / k.block;
  for (int64_t r = 0; r < n_q; ++r) {
    const float step = q_step[r] * (1.0f / 256.0f);
    for (int64_t j = 0; j < k.n_rows; ++j) {
      const uint8_t* codes = k.codes + j * k.code_stride;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t total = 0;
        for (int64_t e = b * k.block; e < (b + 1) * k.block; ++e) {
          total += static_cast<int32_t>(q16[r * k.dim + e]) * (2 * static_cast<int32_t>(codes[e]) - 255);
        }
        const float product = static_cast<float>(total) * base::f16_to_f32(k.scales[j * nb + b]);
        acc = b == 0 ? product : acc + product;
      }
      scores[r * ld + j] = std::fma(acc, step, bias != nullptr ? bias[r] : 0.0f);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
