// Highway kernel for latent_pair_tiles.h, compiled once per target and dispatched at run time.
// Compiled with -ffp-contract=off (src/veloxquant/CMakeLists.txt): every multiply-add here is an
// explicit FMA and every sum a separate add, as in the scorer it must equal.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/latent_pair_tiles.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/latent_pair_tiles.h"

#include <vector>

#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/sum_quads512-inl.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {

#undef VQ_PAIR_TILES_AVX512
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define VQ_PAIR_TILES_AVX512 1

// sum_quads512: attention/sum_quads512-inl.h.

// 8 rows (4 pairs from `pairs`) x Q queries (Q <= 3). acc[p][k] = [row 2p | row 2p + 1] lane
// sums of query k; after sum_quads512 over p, block 0 / 1 hold rows 0, 2, 4, 6's half sums
// (lanes 0-3 / 4-7) and blocks 2 / 3 rows 1, 3, 5, 7's; two permutes put each row's halves in
// row order and one add finishes two queries (k, k') at once: [k rows 0-7 | k' rows 0-7].
template <int Q>
HWY_INLINE void score_eight_rows(const float* const* q, const float* pairs, int64_t chunks, const float* tail,
                                 int64_t t_count, float* const* out) {
  __m512 acc[4][Q];
  for (int p = 0; p < 4; ++p) {
    for (int k = 0; k < Q; ++k) acc[p][k] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    __m512 qv[Q];
    for (int k = 0; k < Q; ++k) qv[k] = _mm512_broadcast_f32x8(_mm256_loadu_ps(q[k] + 8 * c));
    for (int p = 0; p < 4; ++p) {
      const __m512 x = _mm512_loadu_ps(pairs + (p * chunks + c) * 16);
      for (int k = 0; k < Q; ++k) acc[p][k] = _mm512_fmadd_ps(qv[k], x, acc[p][k]);
    }
  }
  const __m512i lo = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
  const __m512i hi = _mm512_setr_epi32(4, 12, 5, 13, 6, 14, 7, 15, 20, 28, 21, 29, 22, 30, 23, 31);
  for (int k = 0; k < Q; k += 2) {
    const int k2 = k + 1 < Q ? k + 1 : k;
    const __m512 s = sum_quads512(acc[0][k], acc[1][k], acc[2][k], acc[3][k]);
    const __m512 s2 = k2 == k ? s : sum_quads512(acc[0][k2], acc[1][k2], acc[2][k2], acc[3][k2]);
    const __m512 v = _mm512_add_ps(_mm512_permutex2var_ps(s, lo, s2), _mm512_permutex2var_ps(s, hi, s2));
    __m256 a = _mm512_castps512_ps256(v), b = _mm512_extractf32x8_ps(v, 1);
    // The last d % 8 elements, 8 rows a vector, by FMA in order (score_rows' per-row tail).
    for (int64_t t = 0; t < t_count; ++t) {
      const __m256 x = _mm256_loadu_ps(tail + t * 8);
      a = _mm256_fmadd_ps(_mm256_set1_ps(q[k][8 * chunks + t]), x, a);
      if (k2 != k) b = _mm256_fmadd_ps(_mm256_set1_ps(q[k2][8 * chunks + t]), x, b);
    }
    _mm256_storeu_ps(out[k], a);
    if (k2 != k) _mm256_storeu_ps(out[k2], b);
  }
}

template <int Q>
HWY_INLINE void score_queries(const float* q, int64_t q_stride, const float* tile, int64_t n_rows, int64_t d,
                              float* scores, int64_t ld) {
  const int64_t chunks = d / 8, t_count = d % 8;
  const float* tail = tile + (n_rows / 2) * chunks * 16;
  const float* qs[Q];
  for (int k = 0; k < Q; ++k) qs[k] = q + k * q_stride;
  for (int64_t j = 0; j < n_rows; j += 8) {
    float* out[Q];
    for (int k = 0; k < Q; ++k) out[k] = scores + k * ld + j;
    score_eight_rows<Q>(qs, tile + (j / 2) * chunks * 16, chunks, tail + (j / 8) * t_count * 8, t_count, out);
  }
}
#endif

bool PairTilesDirect() {
#ifdef VQ_PAIR_TILES_AVX512
  return true;
#else
  return false;
#endif
}

void ScorePairTile(const float* q, int64_t q_stride, int64_t n_q, const float* tile, int64_t n_rows, int64_t d,
                   float* scores, int64_t ld) {
#ifdef VQ_PAIR_TILES_AVX512
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) score_queries<3>(q + r * q_stride, q_stride, tile, n_rows, d, scores + r * ld, ld);
  if (n_q - r == 2) score_queries<2>(q + r * q_stride, q_stride, tile, n_rows, d, scores + r * ld, ld);
  if (n_q - r == 1) score_queries<1>(q + r * q_stride, q_stride, tile, n_rows, d, scores + r * ld, ld);
#else
  // The rows back from the tile, scored by the shared kernel (its results by construction).
  // Grow-only per thread: no allocation once a tile of this size has been seen.
  thread_local std::vector<float> rows;
  rows.resize(static_cast<std::size_t>(n_rows * d));
  const int64_t chunks = d / 8, t_count = d % 8;
  const float* tail = tile + (n_rows / 2) * chunks * 16;
  for (int64_t j = 0; j < n_rows; ++j) {
    float* row = rows.data() + j * d;
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t l = 0; l < 8; ++l) row[8 * c + l] = tile[((j / 2) * chunks + c) * 16 + (j % 2) * 8 + l];
    }
    for (int64_t t = 0; t < t_count; ++t) row[8 * chunks + t] = tail[((j / 8) * t_count + t) * 8 + j % 8];
  }
  lm::kernels::tiles::score_rows(q, q_stride, n_q, rows.data(), d, n_rows, d, scores, ld);
#endif
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(PairTilesDirect);
HWY_EXPORT(ScorePairTile);

bool pair_tiles_direct() { return HWY_DYNAMIC_DISPATCH(PairTilesDirect)(); }

void pair_tile_from_rows(const float* rows, int64_t row_stride, int64_t n_rows, int64_t d, float* tile) {
  const int64_t chunks = d / 8, t_count = d % 8;
  float* tail = tile + (n_rows / 2) * chunks * 16;
  for (int64_t j = 0; j < n_rows; ++j) {
    const float* row = rows + j * row_stride;
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t l = 0; l < 8; ++l) tile[((j / 2) * chunks + c) * 16 + (j % 2) * 8 + l] = row[8 * c + l];
    }
    for (int64_t t = 0; t < t_count; ++t) tail[((j / 8) * t_count + t) * 8 + j % 8] = row[8 * chunks + t];
  }
}

void score_pair_tile(const float* q, int64_t q_stride, int64_t n_q, const float* tile, int64_t n_rows, int64_t d,
                     float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScorePairTile)(q, q_stride, n_q, tile, n_rows, d, scores, ld);
}
}  // namespace veloxquant::attention::kernels
#endif
