// Highway kernel for f16_dots.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/f16_dots.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/f16_dots.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

#include <algorithm>
#include <cmath>

#include "base/half.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 8 lanes of 32 bits (sums_of_4): 256-bit targets and wider; narrower ones run the reference.
#if HWY_TARGET != HWY_SCALAR && HWY_MAX_BYTES >= 32
#define VELOXQUANT_F16_DOTS_SIMD 1
using DF = hn::CappedTag<float, 8>;

// R factor rows x NQ vectors: R * NQ <= 12 accumulators.
template <int R, int NQ>
void dots_block(const uint16_t* a, int64_t a_stride, const float* x, int64_t x_stride, int64_t n, float* out,
                int64_t rank) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const hn::Half<DF> dhalf;
  using V = hn::Vec<DF>;
  V acc[R * NQ];
  for (int k = 0; k < R * NQ; ++k) acc[k] = hn::Zero(df);
  const int64_t whole = n / 8 * 8;
  for (int64_t c = 0; c < whole; c += 8) {
    V xs[NQ];
    for (int r = 0; r < NQ; ++r) xs[r] = hn::LoadU(df, x + r * x_stride + c);
    for (int i = 0; i < R; ++i) {
      const V f = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(a + i * a_stride + c)));
      for (int r = 0; r < NQ; ++r) acc[i * NQ + r] = hn::MulAdd(f, xs[r], acc[i * NQ + r]);
    }
  }
  // Reduced four accumulators at a time; lane k of a sums_of_4 result is accumulator k's sum.
  HWY_ALIGN float sums[16];
  const V zero = hn::Zero(df);
  for (int k = 0; k < R * NQ; k += 4) {
    const auto get = [&](int m) { return m < R * NQ ? acc[m] : zero; };
    hn::Store(sums_of_4(df, get(k), get(k + 1), get(k + 2), get(k + 3)), dhalf, sums + k);
  }
  if (whole == n) {  // no partial chunk (GEAR's 32- and 64-element products): no tail loops
    for (int i = 0; i < R; ++i) {
      for (int r = 0; r < NQ; ++r) out[r * rank + i] = sums[i * NQ + r];
    }
    return;
  }
  for (int i = 0; i < R; ++i) {
    for (int r = 0; r < NQ; ++r) {
      float s = sums[i * NQ + r];
      for (int64_t c = whole; c < n; ++c) s += base::f16_to_f32(a[i * a_stride + c]) * x[r * x_stride + c];
      out[r * rank + i] = s;
    }
  }
}

template <int NQ>
void dots_queries(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n,
                  float* out) {
  // Factor rows four at a time (three with three queries: 9 accumulators), then the rest.
  constexpr int kRows = NQ == 3 ? 3 : 4;
  int64_t i = 0;
  for (; i + kRows <= rank; i += kRows)
    dots_block<kRows, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
  if (i + 2 <= rank) {  // GEAR's usual rank 2
    dots_block<2, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
    i += 2;
  }
  for (; i < rank; ++i) dots_block<1, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
}
// Output rows NQ at a time, factor rows R at a time (R * NQ coefficients in registers).
template <int R, int NQ>
void rank_update_block(const float* coef, int64_t rank, const uint16_t* a, int64_t a_stride, int64_t n, float* out,
                       int64_t out_stride) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  using V = hn::Vec<DF>;
  V c[R * NQ];
  for (int r = 0; r < NQ; ++r) {
    for (int i = 0; i < R; ++i) c[r * R + i] = hn::Set(df, coef[r * rank + i]);
  }
  const int64_t whole = n / 8 * 8;
  for (int64_t t = 0; t < whole; t += 8) {
    V f[R];
    for (int i = 0; i < R; ++i) {
      f[i] = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(a + i * a_stride + t)));
    }
    for (int r = 0; r < NQ; ++r) {
      float* o = out + r * out_stride + t;
      V v = hn::LoadU(df, o);
      for (int i = 0; i < R; ++i) v = hn::MulAdd(c[r * R + i], f[i], v);
      hn::StoreU(v, df, o);
    }
  }
  for (int64_t t = whole; t < n; ++t) {
    for (int r = 0; r < NQ; ++r) {
      float v = out[r * out_stride + t];
      for (int i = 0; i < R; ++i) v = std::fma(coef[r * rank + i], base::f16_to_f32(a[i * a_stride + t]), v);
      out[r * out_stride + t] = v;
    }
  }
}

// All rank factor rows for NQ output rows: GEAR's ranks 1-4 in one block (at most 12 coefficients
// in registers), larger ranks four rows at a time.
template <int NQ>
void rank_update_rows(const float* coef, int64_t rank, const uint16_t* a, int64_t a_stride, int64_t n, float* out,
                      int64_t out_stride) {
  switch (rank) {
    case 1:
      return rank_update_block<1, NQ>(coef, rank, a, a_stride, n, out, out_stride);
    case 2:
      return rank_update_block<2, NQ>(coef, rank, a, a_stride, n, out, out_stride);
    case 3:
      return rank_update_block<3, NQ>(coef, rank, a, a_stride, n, out, out_stride);
    default:
      break;
  }
  int64_t i = 0;
  for (; i + 4 <= rank; i += 4)
    rank_update_block<4, NQ>(coef + i, rank, a + i * a_stride, a_stride, n, out, out_stride);
  for (; i < rank; ++i) rank_update_block<1, NQ>(coef + i, rank, a + i * a_stride, a_stride, n, out, out_stride);
}
#endif

// AVX-512 (AVX3, AVX3_DL): twice the 8-lane width with the 8-lane arithmetic unchanged, so the
// results stay bit for bit those of the scalar reference. GEAR's energy rule keeps ~20 terms per
// block, which made these products the largest part of its decode.
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define VELOXQUANT_F16_DOTS_WIDE 1

// Lanes 0-7 of each of the four 16-lane accumulators hold one product's 8 lane sums, lanes 8-15
// another's: returns [a, b, c, e lower sums | a, b, c, e upper sums], each reduced exactly as
// sums_of_4 reduces 8 lanes, ((l0 + l2) + (l1 + l3)) + ((l4 + l6) + (l5 + l7)).
HWY_INLINE __m256 paired_sums_of_4(__m512 a, __m512 b, __m512 c, __m512 e) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 ce = _mm512_add_ps(_mm512_unpacklo_ps(c, e), _mm512_unpackhi_ps(c, e));
  const __m512d ab64 = _mm512_castps_pd(ab), ce64 = _mm512_castps_pd(ce);
  const __m512 s =
      _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ab64, ce64)), _mm512_castpd_ps(_mm512_unpackhi_pd(ab64, ce64)));
  // 128-bit blocks of s: 0 and 1 the lower product's lanes 0-3 and 4-7, 2 and 3 the upper's.
  const __m512 even = _mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 odd = _mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_castps512_ps256(_mm512_add_ps(even, odd));
}

// 2P factor rows x NQ vectors, n a multiple of 8: factor rows 2p and 2p + 1 share a vector
// (lanes 0-7 and 8-15), each vector's 8-element chunk is broadcast to both halves; every lane
// sees the fused multiply-adds dots_block's 8-lane accumulators see, in the same order.
template <int P, int NQ>
void dots_pairs(const uint16_t* a, int64_t a_stride, const float* x, int64_t x_stride, int64_t n, float* out,
                int64_t rank) {
  constexpr int kAcc = P * NQ;
  static_assert(kAcc <= 12, "accumulators beyond the register file");
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 8) {
    __m512 xs[NQ];
    for (int r = 0; r < NQ; ++r) xs[r] = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + r * x_stride + c));
    for (int p = 0; p < P; ++p) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * p * a_stride + c));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + (2 * p + 1) * a_stride + c));
      const __m512 f = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
      for (int r = 0; r < NQ; ++r) acc[p * NQ + r] = _mm512_fmadd_ps(f, xs[r], acc[p * NQ + r]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int k = 0; k < kAcc; k += 4) {
    const auto get = [&](int m) { return m < kAcc ? acc[m] : zero; };
    HWY_ALIGN float sums[8];
    _mm256_store_ps(sums, paired_sums_of_4(get(k), get(k + 1), get(k + 2), get(k + 3)));
    for (int m = 0; m < 4 && k + m < kAcc; ++m) {
      const int p = (k + m) / NQ, r = (k + m) % NQ;
      out[r * rank + 2 * p] = sums[m];
      out[r * rank + 2 * p + 1] = sums[4 + m];
    }
  }
}

// All rank factor rows for NQ vectors: pairs of rows, eight rows (four pairs) at a time with three
// vectors at most, then the odd row by the 8-lane block. A length with a partial chunk keeps the
// 8-lane loops (its tail is summed after the chunks, which these do not handle).
template <int NQ>
void dots_queries_wide(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n,
                       float* out) {
  if (n % 8 != 0) return dots_queries<NQ>(a, a_stride, rank, x, x_stride, n, out);
  int64_t i = 0;
  for (; i + 8 <= rank; i += 8) dots_pairs<4, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
  if (i + 4 <= rank) {
    dots_pairs<2, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
    i += 4;
  }
  if (i + 2 <= rank) {
    dots_pairs<1, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
    i += 2;
  }
  if (i < rank) dots_block<1, NQ>(a + i * a_stride, a_stride, x, x_stride, n, out + i, rank);
}

// rank_update_block on 16 elements at a time (each element's chain of fused multiply-adds, i
// ascending onto its old value, is the same), the last partial 16 by the 8-lane block.
template <int R, int NQ>
void rank_update_wide(const float* coef, int64_t rank, const uint16_t* a, int64_t a_stride, int64_t n, float* out,
                      int64_t out_stride) {
  __m512 c[R * NQ];
  for (int r = 0; r < NQ; ++r) {
    for (int i = 0; i < R; ++i) c[r * R + i] = _mm512_set1_ps(coef[r * rank + i]);
  }
  const int64_t whole = n / 16 * 16;
  for (int64_t t = 0; t < whole; t += 16) {
    __m512 f[R];
    for (int i = 0; i < R; ++i) {
      f[i] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i * a_stride + t)));
    }
    for (int r = 0; r < NQ; ++r) {
      float* o = out + r * out_stride + t;
      __m512 v = _mm512_loadu_ps(o);
      for (int i = 0; i < R; ++i) v = _mm512_fmadd_ps(c[r * R + i], f[i], v);
      _mm512_storeu_ps(o, v);
    }
  }
  if (whole < n) rank_update_block<R, NQ>(coef, rank, a + whole, a_stride, n - whole, out + whole, out_stride);
}

// Ranks up to 8 in one block (with three output rows, 24 coefficients and 8 factor vectors in the
// 32 registers), larger ranks eight rows at a time, then the remainder.
template <int NQ>
void rank_update_rows_wide(const float* coef, int64_t rank, const uint16_t* a, int64_t a_stride, int64_t n, float* out,
                           int64_t out_stride) {
  int64_t i = 0;
  for (; i + 8 <= rank; i += 8) rank_update_wide<8, NQ>(coef + i, rank, a + i * a_stride, a_stride, n, out, out_stride);
  const float* ci = coef + i;
  const uint16_t* ai = a + i * a_stride;
  switch (rank - i) {
    case 1:
      return rank_update_wide<1, NQ>(ci, rank, ai, a_stride, n, out, out_stride);
    case 2:
      return rank_update_wide<2, NQ>(ci, rank, ai, a_stride, n, out, out_stride);
    case 3:
      return rank_update_wide<3, NQ>(ci, rank, ai, a_stride, n, out, out_stride);
    case 4:
      return rank_update_wide<4, NQ>(ci, rank, ai, a_stride, n, out, out_stride);
    case 5:
      return rank_update_wide<5, NQ>(ci, rank, ai, a_stride, n, out, out_stride);
    case 6:
      return rank_update_wide<6, NQ>(ci, rank, ai, a_stride, n, out, out_stride);
    case 7:
      return rank_update_wide<7, NQ>(ci, rank, ai, a_stride, n, out, out_stride);
    default:
      return;
  }
}
#endif

void F16RankUpdateImpl(const float* coef, int64_t rank, int64_t n_out, const uint16_t* a, int64_t a_stride, int64_t n,
                       float* out, int64_t out_stride) {
#if defined(VELOXQUANT_F16_DOTS_WIDE)
  int64_t r = 0;
  for (; r + 3 <= n_out; r += 3) {
    rank_update_rows_wide<3>(coef + r * rank, rank, a, a_stride, n, out + r * out_stride, out_stride);
  }
  for (; r < n_out; ++r) {
    rank_update_rows_wide<1>(coef + r * rank, rank, a, a_stride, n, out + r * out_stride, out_stride);
  }
#elif defined(VELOXQUANT_F16_DOTS_SIMD)
  int64_t r = 0;
  for (; r + 3 <= n_out; r += 3) {
    rank_update_rows<3>(coef + r * rank, rank, a, a_stride, n, out + r * out_stride, out_stride);
  }
  for (; r < n_out; ++r) rank_update_rows<1>(coef + r * rank, rank, a, a_stride, n, out + r * out_stride, out_stride);
#else
  scalar::f16_rank_update(coef, rank, n_out, a, a_stride, n, out, out_stride);
#endif
}

void F16DotsImpl(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
                 int64_t n, float* out) {
#if defined(VELOXQUANT_F16_DOTS_WIDE)
  int64_t r = 0;
  for (; r + 3 <= n_x; r += 3) dots_queries_wide<3>(a, a_stride, rank, x + r * x_stride, x_stride, n, out + r * rank);
  for (; r < n_x; ++r) dots_queries_wide<1>(a, a_stride, rank, x + r * x_stride, x_stride, n, out + r * rank);
#elif defined(VELOXQUANT_F16_DOTS_SIMD)
  int64_t r = 0;
  for (; r + 3 <= n_x; r += 3) dots_queries<3>(a, a_stride, rank, x + r * x_stride, x_stride, n, out + r * rank);
  for (; r < n_x; ++r) dots_queries<1>(a, a_stride, rank, x + r * x_stride, x_stride, n, out + r * rank);
#else
  scalar::f16_dots(a, a_stride, rank, x, x_stride, n_x, n, out);
#endif
}

// Per tile, block by block, the two kernels above called directly (one dispatch per tile, not two
// per block).
void LowRankScoresImpl(const LowRankTerms& f, int64_t j0, int64_t j1, const float* q, int64_t q_stride, int64_t d,
                       int64_t n_q, float* scores, int64_t ld, float* projection) {
  const int64_t most = std::min(f.group, d);
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / f.group, end = std::min(j1, (block + 1) * f.group);
    const int32_t* terms = f.terms + block * f.terms_stride + f.field;
    const int64_t first = terms[0], rank = std::min<int64_t>(terms[1], most);
    const uint16_t* right = f.right + first * f.right_stride;
    const uint16_t* left = f.left + first * f.left_stride + (a - block * f.group);
#if defined(VELOXQUANT_F16_DOTS_SIMD) && !defined(VELOXQUANT_F16_DOTS_WIDE)
    if (rank == 2 && n_q == 3) {  // GEAR's usual rank, one GQA group: what the general calls pick
      dots_block<2, 3>(right, f.right_stride, q, q_stride, d, projection, rank);
      rank_update_block<2, 3>(projection, rank, left, f.left_stride, end - a, scores + (a - j0), ld);
      a = end;
      continue;
    }
#endif
    if (rank > 0) {
      F16DotsImpl(right, f.right_stride, rank, q, q_stride, n_q, d, projection);
      F16RankUpdateImpl(projection, rank, n_q, left, f.left_stride, end - a, scores + (a - j0), ld);
    }
    a = end;
  }
}

void LowRankValuesImpl(const LowRankTerms& f, int64_t j0, int64_t j1, const float* weights, int64_t ld, int64_t n_q,
                       int64_t dv, float* acc, float* coefficient) {
  const int64_t most = std::min(f.group, dv);
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / f.group, end = std::min(j1, (block + 1) * f.group);
    const int32_t* terms = f.terms + block * f.terms_stride + f.field;
    const int64_t first = terms[0], rank = std::min<int64_t>(terms[1], most);
    const uint16_t* left = f.left + first * f.left_stride + (a - block * f.group);
    const uint16_t* right = f.right + first * f.right_stride;
#if defined(VELOXQUANT_F16_DOTS_SIMD) && !defined(VELOXQUANT_F16_DOTS_WIDE)
    if (rank == 2 && n_q == 3) {
      dots_block<2, 3>(left, f.left_stride, weights + (a - j0), ld, end - a, coefficient, rank);
      rank_update_block<2, 3>(coefficient, rank, right, f.right_stride, dv, acc, dv);
      a = end;
      continue;
    }
#endif
    if (rank > 0) {
      F16DotsImpl(left, f.left_stride, rank, weights + (a - j0), ld, n_q, end - a, coefficient);
      F16RankUpdateImpl(coefficient, rank, n_q, right, f.right_stride, dv, acc, dv);
    }
    a = end;
  }
}

#undef VELOXQUANT_F16_DOTS_SIMD
#undef VELOXQUANT_F16_DOTS_WIDE

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(F16DotsImpl);
HWY_EXPORT(F16RankUpdateImpl);
HWY_EXPORT(LowRankScoresImpl);
HWY_EXPORT(LowRankValuesImpl);

void low_rank_scores(const LowRankTerms& keys, int64_t j0, int64_t j1, const float* q, int64_t q_stride, int64_t d,
                     int64_t n_q, float* scores, int64_t ld, float* projection) {
  if (j0 >= j1 || n_q <= 0) return;
  HWY_DYNAMIC_DISPATCH(LowRankScoresImpl)(keys, j0, j1, q, q_stride, d, n_q, scores, ld, projection);
}

void low_rank_values(const LowRankTerms& values, int64_t j0, int64_t j1, const float* weights, int64_t ld, int64_t n_q,
                     int64_t dv, float* acc, float* coefficient) {
  if (j0 >= j1 || n_q <= 0) return;
  HWY_DYNAMIC_DISPATCH(LowRankValuesImpl)(values, j0, j1, weights, ld, n_q, dv, acc, coefficient);
}

void f16_rank_update(const float* coef, int64_t rank, int64_t n_out, const uint16_t* a, int64_t a_stride, int64_t n,
                     float* out, int64_t out_stride) {
  if (rank <= 0 || n_out <= 0 || n <= 0) return;
  HWY_DYNAMIC_DISPATCH(F16RankUpdateImpl)(coef, rank, n_out, a, a_stride, n, out, out_stride);
}

void f16_dots(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
              int64_t n, float* out) {
  if (rank <= 0 || n_x <= 0) return;
  HWY_DYNAMIC_DISPATCH(F16DotsImpl)(a, a_stride, rank, x, x_stride, n_x, n, out);
}

namespace scalar {
void low_rank_scores(const LowRankTerms& f, int64_t j0, int64_t j1, const float* q, int64_t q_stride, int64_t d,
                     int64_t n_q, float* scores, int64_t ld, float* projection) {
  const int64_t most = std::min(f.group, d);
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / f.group, end = std::min(j1, (block + 1) * f.group);
    const int32_t* terms = f.terms + block * f.terms_stride + f.field;
    const int64_t first = terms[0], rank = std::min<int64_t>(terms[1], most);
    if (rank > 0) {
      f16_dots(f.right + first * f.right_stride, f.right_stride, rank, q, q_stride, n_q, d, projection);
      f16_rank_update(projection, rank, n_q, f.left + first * f.left_stride + (a - block * f.group), f.left_stride,
                      end - a, scores + (a - j0), ld);
    }
    a = end;
  }
}

void low_rank_values(const LowRankTerms& f, int64_t j0, int64_t j1, const float* weights, int64_t ld, int64_t n_q,
                     int64_t dv, float* acc, float* coefficient) {
  const int64_t most = std::min(f.group, dv);
  for (int64_t a = j0; a < j1;) {
    const int64_t block = a / f.group, end = std::min(j1, (block + 1) * f.group);
    const int32_t* terms = f.terms + block * f.terms_stride + f.field;
    const int64_t first = terms[0], rank = std::min<int64_t>(terms[1], most);
    if (rank > 0) {
      f16_dots(f.left + first * f.left_stride + (a - block * f.group), f.left_stride, rank, weights + (a - j0), ld, n_q,
               end - a, coefficient);
      f16_rank_update(coefficient, rank, n_q, f.right + first * f.right_stride, f.right_stride, dv, acc, dv);
    }
    a = end;
  }
}

void f16_rank_update(const float* coef, int64_t rank, int64_t n_out, const uint16_t* a, int64_t a_stride, int64_t n,
                     float* out, int64_t out_stride) {
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t t = 0; t < n; ++t) {
      float v = out[r * out_stride + t];
      for (int64_t i = 0; i < rank; ++i) v = std::fma(coef[r * rank + i], base::f16_to_f32(a[i * a_stride + t]), v);
      out[r * out_stride + t] = v;
    }
  }
}

void f16_dots(const uint16_t* a, int64_t a_stride, int64_t rank, const float* x, int64_t x_stride, int64_t n_x,
              int64_t n, float* out) {
  const int64_t whole = n / 8 * 8;
  for (int64_t r = 0; r < n_x; ++r) {
    for (int64_t i = 0; i < rank; ++i) {
      float lane[8] = {};
      for (int64_t c = 0; c < whole; ++c) {
        lane[c % 8] = std::fma(base::f16_to_f32(a[i * a_stride + c]), x[r * x_stride + c], lane[c % 8]);
      }
      float s = ((lane[0] + lane[2]) + (lane[1] + lane[3])) + ((lane[4] + lane[6]) + (lane[5] + lane[7]));
      for (int64_t c = whole; c < n; ++c) s += base::f16_to_f32(a[i * a_stride + c]) * x[r * x_stride + c];
      out[r * rank + i] = s;
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
