// Highway per-target compilation of anchorkv_residuals.h: the fused kernels exist for AVX-512
// (AVX3 and above); every other target runs the reference.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/anchorkv_residuals.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/anchorkv_residuals.h"

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/sum_quads512-inl.h"
#include "veloxquant/attention/tile_kernels.h"

#if HWY_ONCE
namespace veloxquant::scalar {

namespace {
void unpack_rows(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, float* out) {
  const int64_t d = 8 / bits * plane_bytes;
  for (int64_t i = 0; i < n; ++i)
    attention::kernels::unpack_planes(rows[i], plane_bytes, 1, plane_bytes, bits, out + i * d);
}
}  // namespace

void score_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* q,
                          int64_t q_stride, int64_t n_q, float* dots, int64_t ld, float* scratch) {
  const int64_t d = 8 / bits * plane_bytes;
  unpack_rows(rows, n, plane_bytes, bits, scratch);
  lm::kernels::tiles::score_rows(q, q_stride, n_q, scratch, d, n, d, dots, ld);
}

void accumulate_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* w,
                               int64_t ld, int64_t n_q, float* sums, int64_t sums_stride, float* scratch) {
  const int64_t d = 8 / bits * plane_bytes;
  unpack_rows(rows, n, plane_bytes, bits, scratch);
  lm::kernels::tiles::accumulate_rows(w, ld, n_q, scratch, d, n, d, sums, sums_stride);
}

}  // namespace veloxquant::scalar
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {

// Set per target pass (this file is compiled once per target).
#undef VQ_ANCHORKV_FUSED
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define VQ_ANCHORKV_FUSED 1

// The fused geometry: 2-bit codes, 16-byte planes (64 elements). Plane k holds element k * 16 + p
// at bits 2k of byte p.
constexpr int kBits = 2;
constexpr int64_t kPlaneBytes = 16;

HWY_INLINE __m512 plane_floats(__m512i bytes, __m512i shift) {
  return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(bytes, shift), _mm512_set1_epi32(3)));
}

// Whole passes of 8 rows: pair p's vector holds rows 2p (lanes 0-7) and 2p + 1 (lanes 8-15) of
// one 8-element chunk; chunk e is bytes 8 (e % 2) .. + 7 of plane e / 2. Per lane the FMA chain
// over the chunks, then score_rows' reduction tree (as svdq_latent_scores.cpp).
template <int NQ>
HWY_INLINE void score_passes(const uint8_t* const* rows, int64_t whole, const float* q, int64_t q_stride, float* dots,
                             int64_t ld) {
  __m512 qv[NQ][8];
  for (int r = 0; r < NQ; ++r) {
    for (int e = 0; e < 8; ++e) qv[r][e] = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + r * q_stride + 8 * e));
  }
  __m512i shift[4];
  for (int k = 0; k < 4; ++k) shift[k] = _mm512_set1_epi32(kBits * k);
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 8, 1, 9, 2, 10, 3, 11);
  for (int64_t j = 0; j < whole; j += 8) {
    __m512i bytes[4][2];
    for (int p = 0; p < 4; ++p) {
      const uint8_t* a = rows[j + 2 * p];
      const uint8_t* b = rows[j + 2 * p + 1];
      for (int s = 0; s < 2; ++s) {
        const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + 8 * s));
        const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * s));
        bytes[p][s] = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(lo, hi));
      }
    }
    __m512 acc[NQ][4];
    for (int r = 0; r < NQ; ++r) {
      for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int e = 0; e < 8; ++e) {
      for (int p = 0; p < 4; ++p) {
        const __m512 x = plane_floats(bytes[p][e % 2], shift[e / 2]);
        for (int r = 0; r < NQ; ++r) acc[r][p] = _mm512_fmadd_ps(qv[r][e], x, acc[r][p]);
      }
    }
    for (int r = 0; r < NQ; ++r) {
      const __m512 s = attention::kernels::HWY_NAMESPACE::sum_quads512(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      const __m512 t = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
      _mm256_storeu_ps(dots + r * ld + j, _mm512_castps512_ps256(_mm512_permutexvar_ps(order, t)));
    }
  }
}

// Each row's 16 bytes widened once; plane k is 16 elements; per (query, element) one FMA chain
// over the rows in order.
template <int NQ>
HWY_INLINE void accumulate_fused(const uint8_t* const* rows, int64_t n, const float* w, int64_t ld, float* sums,
                                 int64_t sums_stride) {
  __m512 a[NQ][4];
  for (int r = 0; r < NQ; ++r) {
    for (int k = 0; k < 4; ++k) a[r][k] = _mm512_loadu_ps(sums + r * sums_stride + 16 * k);
  }
  __m512i shift[4];
  for (int k = 0; k < 4; ++k) shift[k] = _mm512_set1_epi32(kBits * k);
  for (int64_t i = 0; i < n; ++i) {
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i])));
    __m512 x[4];
    for (int k = 0; k < 4; ++k) x[k] = plane_floats(bytes, shift[k]);
    for (int r = 0; r < NQ; ++r) {
      const __m512 wv = _mm512_set1_ps(w[r * ld + i]);
      for (int k = 0; k < 4; ++k) a[r][k] = _mm512_fmadd_ps(wv, x[k], a[r][k]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int k = 0; k < 4; ++k) _mm512_storeu_ps(sums + r * sums_stride + 16 * k, a[r][k]);
  }
}

bool FusesImpl(int bits, int64_t plane_bytes) { return bits == kBits && plane_bytes == kPlaneBytes; }
#else
bool FusesImpl(int, int64_t) { return false; }
#endif

void ScoreResidualCodesImpl(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* q,
                            int64_t q_stride, int64_t n_q, float* dots, int64_t ld, float* scratch) {
#ifdef VQ_ANCHORKV_FUSED
  const int64_t whole = n - n % 8;
  if (whole > 0 && n_q >= 1 && n_q <= 3 && FusesImpl(bits, plane_bytes)) {
    switch (n_q) {
      case 1:
        score_passes<1>(rows, whole, q, q_stride, dots, ld);
        break;
      case 2:
        score_passes<2>(rows, whole, q, q_stride, dots, ld);
        break;
      default:
        score_passes<3>(rows, whole, q, q_stride, dots, ld);
        break;
    }
    // The last n % 8 rows: score_rows takes them one by one, as at the end of the whole block.
    if (whole < n)
      scalar::score_residual_codes(rows + whole, n - whole, plane_bytes, bits, q, q_stride, n_q, dots + whole, ld,
                                   scratch);
    return;
  }
#endif
  scalar::score_residual_codes(rows, n, plane_bytes, bits, q, q_stride, n_q, dots, ld, scratch);
}

void AccumulateResidualCodesImpl(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* w,
                                 int64_t ld, int64_t n_q, float* sums, int64_t sums_stride, float* scratch) {
#ifdef VQ_ANCHORKV_FUSED
  if (n_q >= 1 && n_q <= 3 && FusesImpl(bits, plane_bytes)) {
    switch (n_q) {
      case 1:
        accumulate_fused<1>(rows, n, w, ld, sums, sums_stride);
        break;
      case 2:
        accumulate_fused<2>(rows, n, w, ld, sums, sums_stride);
        break;
      default:
        accumulate_fused<3>(rows, n, w, ld, sums, sums_stride);
        break;
    }
    return;
  }
#endif
  scalar::accumulate_residual_codes(rows, n, plane_bytes, bits, w, ld, n_q, sums, sums_stride, scratch);
}

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(FusesImpl);
HWY_EXPORT(ScoreResidualCodesImpl);
HWY_EXPORT(AccumulateResidualCodesImpl);

bool residual_codes_fuse(int bits, int64_t plane_bytes) { return HWY_DYNAMIC_DISPATCH(FusesImpl)(bits, plane_bytes); }

void score_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* q,
                          int64_t q_stride, int64_t n_q, float* dots, int64_t ld, float* scratch) {
  HWY_DYNAMIC_DISPATCH(ScoreResidualCodesImpl)(rows, n, plane_bytes, bits, q, q_stride, n_q, dots, ld, scratch);
}

void accumulate_residual_codes(const uint8_t* const* rows, int64_t n, int64_t plane_bytes, int bits, const float* w,
                               int64_t ld, int64_t n_q, float* sums, int64_t sums_stride, float* scratch) {
  HWY_DYNAMIC_DISPATCH(AccumulateResidualCodesImpl)(rows, n, plane_bytes, bits, w, ld, n_q, sums, sums_stride, scratch);
}

}  // namespace veloxquant
#endif
