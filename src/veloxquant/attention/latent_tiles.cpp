// Highway kernels for latent_tiles.h, compiled once per target and dispatched at run time.
// Compiled with -ffp-contract=off (src/veloxquant/CMakeLists.txt): reconstruct_latent_rows
// must round each product before its sum, as the scalar loop it replaces did.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/latent_tiles.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/latent_tiles.h"

#include <algorithm>
#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/sum_quads512-inl.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Set per target pass (this file is compiled once per target).
#undef VQ_LATENT_AVX512
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define VQ_LATENT_AVX512 1
// sum_quads512: attention/sum_quads512-inl.h.

// Queries a (lanes 0-7) and b (lanes 8-15) against rows [0, n_rows) in passes of 8 rows: lane
// group k of acc[k] is row k's 8 partial sums for that query, each the FMA chain over e that
// score_query<8> runs; then ScoreRows' tree (pairs, quads, the two 128-bit halves added) per
// query. Rows past the whole passes and the last d % 8 elements as ScoreRows does them.
HWY_INLINE void score_pair(const float* qa, const float* qb, bool two, const float* rows, int64_t row_stride,
                           int64_t whole, int64_t d, float* out_a, float* out_b) {
  const int64_t dv = d - d % 8;
  // Output lane k < 8 = query a's row k, 8 + k = query b's: row k's halves are lane k of
  // s0123 / s4567 blocks 0 and 1 (query a) or blocks 2 and 3 (query b).
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64_t j = 0; j < whole; j += 8) {
    const float* r0 = rows + j * row_stride;
    __m512 acc[8];
    for (int k = 0; k < 8; ++k) acc[k] = _mm512_setzero_ps();
    for (int64_t e = 0; e < dv; e += 8) {
      const __m512 qv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(qa + e)), _mm256_loadu_ps(qb + e), 1);
      for (int k = 0; k < 8; ++k) {
        acc[k] = _mm512_fmadd_ps(qv, _mm512_broadcast_f32x8(_mm256_loadu_ps(r0 + k * row_stride + e)), acc[k]);
      }
    }
    const __m512 s0123 = sum_quads512(acc[0], acc[1], acc[2], acc[3]);
    const __m512 s4567 = sum_quads512(acc[4], acc[5], acc[6], acc[7]);
    const __m512 s = _mm512_add_ps(_mm512_permutex2var_ps(s0123, lo, s4567), _mm512_permutex2var_ps(s0123, hi, s4567));
    _mm256_storeu_ps(out_a + j, _mm512_castps512_ps256(s));
    if (two) _mm256_storeu_ps(out_b + j, _mm512_extractf32x8_ps(s, 1));
    for (int64_t e = dv; e < d; ++e) {
      for (int k = 0; k < 8; ++k) {
        const float x = r0[k * row_stride + e];
        out_a[j + k] = __builtin_fmaf(qa[e], x, out_a[j + k]);
        if (two) out_b[j + k] = __builtin_fmaf(qb[e], x, out_b[j + k]);
      }
    }
  }
}
#endif

void ScoreLatentRows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride,
                     int64_t n_rows, int64_t d, float* scores, int64_t ld) {
#ifdef VQ_LATENT_AVX512
  const int64_t whole = n_rows - n_rows % 8;
  for (int64_t r = 0; r < n_q; r += 2) {
    const bool two = r + 1 < n_q;
    const float* qa = q + r * q_stride;
    score_pair(qa, two ? qa + q_stride : qa, two, rows, row_stride, whole, d, scores + r * ld,
               scores + (two ? r + 1 : r) * ld);
  }
  // The last n_rows % 8 rows are scored one by one by the shared kernel (its lane reduction).
  if (whole < n_rows) {
    lm::kernels::tiles::score_rows(q, q_stride, n_q, rows + whole * row_stride, row_stride, n_rows - whole, d,
                                   scores + whole, ld);
  }
#else
  lm::kernels::tiles::score_rows(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld);
#endif
}

#ifdef VQ_LATENT_AVX512
// NQ queries x V vectors of 16 columns from column e (the last vector masked by `tail`): per
// row the NQ weights broadcast, each row vector loaded once for all NQ queries.
template <int NQ, int V>
HWY_INLINE void accumulate_columns512(const float* w, int64_t ld, const float* rows, int64_t row_stride, int64_t n_rows,
                                      int64_t e, float* acc, int64_t acc_stride, __mmask16 tail) {
  __m512 a[NQ][V];
  const auto mask = [&](int c) { return c == V - 1 ? tail : __mmask16(0xFFFF); };
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < V; ++c) a[r][c] = _mm512_maskz_loadu_ps(mask(c), acc + r * acc_stride + e + c * 16);
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    const float* row = rows + j * row_stride + e;
    __m512 wv[NQ];
    for (int r = 0; r < NQ; ++r) wv[r] = _mm512_set1_ps(w[r * ld + j]);
    for (int c = 0; c < V; ++c) {
      const __m512 x = _mm512_maskz_loadu_ps(mask(c), row + c * 16);
      for (int r = 0; r < NQ; ++r) a[r][c] = _mm512_fmadd_ps(wv[r], x, a[r][c]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < V; ++c) _mm512_mask_storeu_ps(acc + r * acc_stride + e + c * 16, mask(c), a[r][c]);
  }
}

template <int NQ>
HWY_INLINE void accumulate_block512(const float* w, int64_t ld, const float* rows, int64_t row_stride, int64_t n_rows,
                                    int64_t d, float* acc, int64_t acc_stride) {
  // 3 queries x 4 vectors: 12 accumulators + 3 weights + a row vector of AVX-512's 32 registers.
  constexpr int V = 4;
  const __mmask16 full = 0xFFFF;
  int64_t e = 0;
  for (; e + V * 16 <= d; e += V * 16)
    accumulate_columns512<NQ, V>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, full);
  // The last 1-4 vectors (the last one masked) in one pass over the rows: each row's weights
  // broadcast once for them, not once per vector (kvtc's ranks are 185-192: 1-4 columns past
  // 176 were four passes, three of them one vector wide).
  const int64_t left = d - e;
  if (left <= 0) return;
  const int vectors = static_cast<int>((left + 15) / 16);
  const int64_t last = left - 16 * (vectors - 1);
  const auto tail = last >= 16 ? full : static_cast<__mmask16>((1u << last) - 1u);
  switch (vectors) {
    case 1:
      accumulate_columns512<NQ, 1>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, tail);
      break;
    case 2:
      accumulate_columns512<NQ, 2>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, tail);
      break;
    case 3:
      accumulate_columns512<NQ, 3>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, tail);
      break;
    default:  // 4: more than 48 columns left, fewer than 64
      accumulate_columns512<NQ, 4>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, tail);
      break;
  }
}
#endif

void AccumulateLatentRows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride,
                          int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
#ifdef VQ_LATENT_AVX512
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3)
    accumulate_block512<3>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride);
  if (n_q - r == 2)
    accumulate_block512<2>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride);
  if (n_q - r == 1)
    accumulate_block512<1>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride);
#else
  lm::kernels::tiles::accumulate_rows(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
#endif
}

// Eight tokens per vector of doubles, one per lane, so every lane sums its token's products in
// the order of c exactly as the scalar loop; four components at a time keep four independent
// FMA chains in flight. Tokens past n (the last block) are zero rows, their lanes dropped.
//
// Fewer tokens than lanes (a decode step's one token): components per lane instead, their basis
// elements gathered column by column, so the basis is not copied to doubles for one token.
HWY_INLINE void project_by_components(const float* basis, int64_t basis_stride, int64_t r, const float* x, int64_t w,
                                      float* z) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const hn::Rebind<int32_t, decltype(dd)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const auto stride = hn::Set(di, static_cast<int32_t>(basis_stride));
  const auto rows = hn::Mul(hn::Iota(di, 0), stride);  // lane l reads component i + l
  double lane_out[16];
  int64_t i = 0;
  for (; i + 4 * lanes <= r; i += 4 * lanes) {
    const float* u = basis + i * basis_stride;
    const auto step = hn::Mul(hn::Set(di, static_cast<int32_t>(lanes)), stride);
    const auto i1 = hn::Add(rows, step), i2 = hn::Add(i1, step), i3 = hn::Add(i2, step);
    auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
    for (int64_t c = 0; c < w; ++c) {
      const auto xv = hn::Set(dd, static_cast<double>(x[c]));
      a0 = hn::MulAdd(hn::PromoteTo(dd, hn::GatherIndex(df, u + c, rows)), xv, a0);
      a1 = hn::MulAdd(hn::PromoteTo(dd, hn::GatherIndex(df, u + c, i1)), xv, a1);
      a2 = hn::MulAdd(hn::PromoteTo(dd, hn::GatherIndex(df, u + c, i2)), xv, a2);
      a3 = hn::MulAdd(hn::PromoteTo(dd, hn::GatherIndex(df, u + c, i3)), xv, a3);
    }
    hn::StoreU(hn::DemoteTo(df, a0), df, z + i);
    hn::StoreU(hn::DemoteTo(df, a1), df, z + i + lanes);
    hn::StoreU(hn::DemoteTo(df, a2), df, z + i + 2 * lanes);
    hn::StoreU(hn::DemoteTo(df, a3), df, z + i + 3 * lanes);
  }
  for (; i < r; i += lanes) {
    const int64_t m = std::min(lanes, r - i);
    // Lanes past r gather component i's row again (in bounds); their sums are dropped.
    const auto idx = hn::IfThenElse(hn::Lt(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(m))), rows, hn::Zero(di));
    const float* u = basis + i * basis_stride;
    auto a = hn::Zero(dd);
    for (int64_t c = 0; c < w; ++c) {
      a = hn::MulAdd(hn::PromoteTo(dd, hn::GatherIndex(df, u + c, idx)), hn::Set(dd, static_cast<double>(x[c])), a);
    }
    hn::StoreU(a, dd, lane_out);
    for (int64_t l = 0; l < m; ++l) z[i + l] = static_cast<float>(lane_out[l]);
  }
}

#ifdef VQ_LATENT_AVX512
// rows[k] <- column k of the 8 x 8 block the rows held (rows[k][m] = old rows[m][k]).
HWY_INLINE void transpose8x8(__m256* v) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// One token, components per lane as project_by_components, but each 8 x 8 block of the basis
// (8 components x 8 columns) read as 8 row loads and transposed in registers: the gathers took
// 4% of a kvtc decode step (30 layers x 2 sides x r x 192 elements a token). B blocks of 8
// components at a time keep B independent FMA chains. Rows past r read component i's row
// again; their lanes are dropped.
template <int B>
HWY_INLINE void project_blocks512(const float* basis, int64_t basis_stride, int64_t i, int64_t r, const float* x,
                                  int64_t w, float* z) {
  const float* u[B][8];
  for (int b = 0; b < B; ++b) {
    for (int k = 0; k < 8; ++k) {
      const int64_t row = i + 8 * b + k;
      u[b][k] = basis + (row < r ? row : i) * basis_stride;
    }
  }
  __m512d acc[B];
  for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_pd();
  const int64_t wv = w - w % 8;
  for (int64_t c = 0; c < wv; c += 8) {
    // The basis (r x 192 floats per side and layer, 30 layers) is read once per step from past
    // L2, B x 8 rows at a time: each row's next line is hinted a few chunks ahead.
    if (c % 16 == 0 && c + 64 < w) {
      for (int b = 0; b < B; ++b) {
        for (int k = 0; k < 8; ++k) _mm_prefetch(reinterpret_cast<const char*>(u[b][k] + c + 64), _MM_HINT_T0);
      }
    }
    // The chunk's 8 inputs widened once for all B blocks; each block is transposed and used
    // before the next one is loaded (B = 4 would not hold 32 transposed columns in registers).
    __m512d xv[8];
    for (int m = 0; m < 8; ++m) xv[m] = _mm512_set1_pd(static_cast<double>(x[c + m]));
    for (int b = 0; b < B; ++b) {
      __m256 col[8];
      for (int k = 0; k < 8; ++k) col[k] = _mm256_loadu_ps(u[b][k] + c);
      transpose8x8(col);
      for (int m = 0; m < 8; ++m) acc[b] = _mm512_fmadd_pd(_mm512_cvtps_pd(col[m]), xv[m], acc[b]);
    }
  }
  for (int64_t c = wv; c < w; ++c) {
    const __m512d xv = _mm512_set1_pd(static_cast<double>(x[c]));
    for (int b = 0; b < B; ++b) {
      const __m256 column = _mm256_setr_ps(u[b][0][c], u[b][1][c], u[b][2][c], u[b][3][c], u[b][4][c], u[b][5][c],
                                           u[b][6][c], u[b][7][c]);
      acc[b] = _mm512_fmadd_pd(_mm512_cvtps_pd(column), xv, acc[b]);
    }
  }
  for (int b = 0; b < B; ++b) {
    alignas(64) double out[8];
    _mm512_store_pd(out, acc[b]);
    for (int64_t k = 0; k < 8 && i + 8 * b + k < r; ++k) z[i + 8 * b + k] = static_cast<float>(out[k]);
  }
}

HWY_INLINE void project_token512(const float* basis, int64_t basis_stride, int64_t r, const float* x, int64_t w,
                                 float* z) {
  // Four blocks of 8 components per pass: four independent FMA chains (each 8 long per chunk
  // of 8 columns) in flight instead of two, which left the step waiting on the FMA latency.
  int64_t i = 0;
  for (; i + 32 <= r; i += 32) project_blocks512<4>(basis, basis_stride, i, r, x, w, z);
  for (; i + 16 <= r; i += 16) project_blocks512<2>(basis, basis_stride, i, r, x, w, z);
  if (i < r) project_blocks512<1>(basis, basis_stride, i, r, x, w, z);
  if (i + 8 < r) project_blocks512<1>(basis, basis_stride, i + 8, r, x, w, z);
}
#endif

void ProjectLatents(const float* basis, int64_t basis_stride, int64_t r, const float* x, int64_t w, int64_t n,
                    float* z) {
  const hn::ScalableTag<double> dd;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  if (n < lanes) {
#ifdef VQ_LATENT_AVX512
    for (int64_t t = 0; t < n; ++t) project_token512(basis, basis_stride, r, x + t * w, w, z + t * r);
#else
    for (int64_t t = 0; t < n; ++t) project_by_components(basis, basis_stride, r, x + t * w, w, z + t * r);
#endif
    return;
  }
  // Grow-only per thread: the tokens' columns as doubles ([c][lane]) and the basis as doubles.
  thread_local std::vector<double> xt, ud;
  xt.resize(static_cast<std::size_t>(w * lanes));
  ud.resize(static_cast<std::size_t>(r * w));
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t c = 0; c < w; ++c) ud[static_cast<std::size_t>(i * w + c)] = basis[i * basis_stride + c];
  }
  double lane_out[4][16];
  for (int64_t t0 = 0; t0 < n; t0 += lanes) {
    const int64_t m = std::min(lanes, n - t0);
    for (int64_t c = 0; c < w; ++c) {
      for (int64_t l = 0; l < lanes; ++l) {
        xt[static_cast<std::size_t>(c * lanes + l)] = l < m ? static_cast<double>(x[(t0 + l) * w + c]) : 0.0;
      }
    }
    int64_t i = 0;
    for (; i + 4 <= r; i += 4) {
      const double* u0 = ud.data() + i * w;
      auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
      for (int64_t c = 0; c < w; ++c) {
        const auto xv = hn::LoadU(dd, xt.data() + c * lanes);
        a0 = hn::MulAdd(hn::Set(dd, u0[c]), xv, a0);
        a1 = hn::MulAdd(hn::Set(dd, u0[w + c]), xv, a1);
        a2 = hn::MulAdd(hn::Set(dd, u0[2 * w + c]), xv, a2);
        a3 = hn::MulAdd(hn::Set(dd, u0[3 * w + c]), xv, a3);
      }
      hn::StoreU(a0, dd, lane_out[0]);
      hn::StoreU(a1, dd, lane_out[1]);
      hn::StoreU(a2, dd, lane_out[2]);
      hn::StoreU(a3, dd, lane_out[3]);
      for (int64_t l = 0; l < m; ++l) {
        for (int k = 0; k < 4; ++k) z[(t0 + l) * r + i + k] = static_cast<float>(lane_out[k][l]);
      }
    }
    for (; i < r; ++i) {
      const double* u = ud.data() + i * w;
      auto a = hn::Zero(dd);
      for (int64_t c = 0; c < w; ++c) a = hn::MulAdd(hn::Set(dd, u[c]), hn::LoadU(dd, xt.data() + c * lanes), a);
      hn::StoreU(a, dd, lane_out[0]);
      for (int64_t l = 0; l < m; ++l) z[(t0 + l) * r + i] = static_cast<float>(lane_out[0][l]);
    }
  }
}

// Columns [c, w) of one row (those past the two-vector blocks): a vector at a time, then
// element by element, each a rounded product and a rounded sum per component in the order of i.
// The one-row and the four-row passes of ReconstructLatentRows share it (issue 14).
HWY_INLINE void reconstruct_tail_columns(const float* basis, int64_t basis_stride, int64_t r, const float* mu,
                                         const float* zt, int64_t c, int64_t w, float* o) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (; c + lanes <= w; c += lanes) {
    auto x0 = hn::LoadU(df, mu + c);
    for (int64_t i = 0; i < r; ++i)
      x0 = hn::Add(x0, hn::Mul(hn::Set(df, zt[i]), hn::LoadU(df, basis + i * basis_stride + c)));
    hn::StoreU(x0, df, o + c);
  }
  for (; c < w; ++c) {
    float x0 = mu[c];
    for (int64_t i = 0; i < r; ++i) x0 = x0 + zt[i] * basis[i * basis_stride + c];
    o[c] = x0;
  }
}

// Columns per vector; per component a rounded product and a rounded sum (no FMA: the file is
// compiled with -ffp-contract=off and Mul / Add are separate instructions).
void ReconstructLatentRows(const float* basis, int64_t basis_stride, int64_t r, const float* mu, const float* z,
                           int64_t w, int64_t n, float* out, int64_t out_stride) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t t = 0;
  // Four rows per pass over the basis: each basis vector loaded once for them, and eight
  // independent add chains instead of two (one row's chain over r waited on the add's latency
  // at every component: 9% of a kvtc prefill). Every element keeps its own chain in the order
  // of i, so the bits are those of one row at a time.
  for (; t + 4 <= n; t += 4) {
    const float* z0 = z + t * r;
    float* o = out + t * out_stride;
    int64_t c = 0;
    for (; c + 2 * lanes <= w; c += 2 * lanes) {
      const auto m0 = hn::LoadU(df, mu + c), m1 = hn::LoadU(df, mu + c + lanes);
      auto x00 = m0, x01 = m1, x10 = m0, x11 = m1, x20 = m0, x21 = m1, x30 = m0, x31 = m1;
      for (int64_t i = 0; i < r; ++i) {
        const float* u = basis + i * basis_stride + c;
        const auto u0 = hn::LoadU(df, u), u1 = hn::LoadU(df, u + lanes);
        const auto a = hn::Set(df, z0[i]), b = hn::Set(df, z0[r + i]);
        const auto e = hn::Set(df, z0[2 * r + i]), f = hn::Set(df, z0[3 * r + i]);
        x00 = hn::Add(x00, hn::Mul(a, u0));
        x01 = hn::Add(x01, hn::Mul(a, u1));
        x10 = hn::Add(x10, hn::Mul(b, u0));
        x11 = hn::Add(x11, hn::Mul(b, u1));
        x20 = hn::Add(x20, hn::Mul(e, u0));
        x21 = hn::Add(x21, hn::Mul(e, u1));
        x30 = hn::Add(x30, hn::Mul(f, u0));
        x31 = hn::Add(x31, hn::Mul(f, u1));
      }
      hn::StoreU(x00, df, o + c);
      hn::StoreU(x01, df, o + c + lanes);
      hn::StoreU(x10, df, o + out_stride + c);
      hn::StoreU(x11, df, o + out_stride + c + lanes);
      hn::StoreU(x20, df, o + 2 * out_stride + c);
      hn::StoreU(x21, df, o + 2 * out_stride + c + lanes);
      hn::StoreU(x30, df, o + 3 * out_stride + c);
      hn::StoreU(x31, df, o + 3 * out_stride + c + lanes);
    }
    // Columns past the last two-vector block: one row at a time, as the rows past the last four.
    if (c < w) {
      for (int64_t k = 0; k < 4; ++k)
        reconstruct_tail_columns(basis, basis_stride, r, mu, z0 + k * r, c, w, o + k * out_stride);
    }
  }
  for (; t < n; ++t) {
    const float* zt = z + t * r;
    float* o = out + t * out_stride;
    int64_t c = 0;
    for (; c + 2 * lanes <= w; c += 2 * lanes) {
      auto x0 = hn::LoadU(df, mu + c), x1 = hn::LoadU(df, mu + c + lanes);
      for (int64_t i = 0; i < r; ++i) {
        const auto zi = hn::Set(df, zt[i]);
        const float* u = basis + i * basis_stride + c;
        x0 = hn::Add(x0, hn::Mul(zi, hn::LoadU(df, u)));
        x1 = hn::Add(x1, hn::Mul(zi, hn::LoadU(df, u + lanes)));
      }
      hn::StoreU(x0, df, o + c);
      hn::StoreU(x1, df, o + c + lanes);
    }
    reconstruct_tail_columns(basis, basis_stride, r, mu, zt, c, w, o);
  }
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(ScoreLatentRows);
HWY_EXPORT(AccumulateLatentRows);
HWY_EXPORT(ProjectLatents);
HWY_EXPORT(ReconstructLatentRows);

void score_latent_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride,
                       int64_t n_rows, int64_t d, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreLatentRows)(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld);
}

void accumulate_latent_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride,
                            int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(AccumulateLatentRows)(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
}

void project_latents(const float* basis, int64_t basis_stride, int64_t r, const float* x, int64_t w, int64_t n,
                     float* z) {
  HWY_DYNAMIC_DISPATCH(ProjectLatents)(basis, basis_stride, r, x, w, n, z);
}

void reconstruct_latent_rows(const float* basis, int64_t basis_stride, int64_t r, const float* mu, const float* z,
                             int64_t w, int64_t n, float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(ReconstructLatentRows)(basis, basis_stride, r, mu, z, w, n, out, out_stride);
}

namespace scalar {
void project_latents(const float* basis, int64_t basis_stride, int64_t r, const float* x, int64_t w, int64_t n,
                     float* z) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < r; ++i) {
      double dot = 0.0;
      for (int64_t c = 0; c < w; ++c) dot += static_cast<double>(basis[i * basis_stride + c]) * x[t * w + c];
      z[t * r + i] = static_cast<float>(dot);
    }
  }
}

void reconstruct_latent_rows(const float* basis, int64_t basis_stride, int64_t r, const float* mu, const float* z,
                             int64_t w, int64_t n, float* out, int64_t out_stride) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < w; ++c) {
      float x = mu[c];
      for (int64_t i = 0; i < r; ++i) x = x + z[t * r + i] * basis[i * basis_stride + c];
      out[t * out_stride + c] = x;
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
