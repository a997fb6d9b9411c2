// Per-target helper (Highway -inl header, included once per SIMD target from inside
// codeword_rows.cpp's foreach_target pass, after its codeword_detail helpers): the 512-bit forms
// of the codeword key scores and value sums (attention/codeword_rows.h). They keep every lane's
// arithmetic of the 8-lane loops, so the results are the same bits:
//
// Keys: one 16-lane vector holds codeword pair p of two rows (lanes 0-7 row s of an 8-row group,
// lanes 8-15 row s + 4), the query's 8 coordinates of pair p duplicated into both halves (a
// per-call copy of the queries, so each FMA reads its query operand straight from memory). Lane
// l of a row's half runs the FMA chain over p of the 8-lane loop; the 8-lane transposed sum is
// then sum_quads512 over the group's four row pairs plus one 128-bit-block shuffle per query pair.
// Half the FMAs of the 8-lane loop; the codeword pairs cost three inserts per two rows, paid once
// for every query of the call (all 48 of a prefill block), so the path is for calls with many
// queries (a decode step's 3 keep the 8-lane loop).
//
// Values: one 16-lane accumulator holds positions t and t + 1 of one query (the codewords of its
// two books side by side), the row's weight broadcast to all 16 lanes: each lane's chain over the
// rows is the 8-lane loop's, with half the FMAs. Also for calls of kMinQueries512 or more.
#if defined(VELOXQUANT_ATTENTION_CODEWORD_ROWS512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VELOXQUANT_ATTENTION_CODEWORD_ROWS512_INL_H_
#undef VELOXQUANT_ATTENTION_CODEWORD_ROWS512_INL_H_
#else
#define VELOXQUANT_ATTENTION_CODEWORD_ROWS512_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "veloxquant/attention/sum_quads512-inl.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Queries per pass of score_keys512: a prefill block's 16 positions times a GQA group of 3. Their
// duplicated coordinates (24 KB) and partial sums (12 KB) stay on the stack.
constexpr int64_t kQueries512 = 48;
// Fewer queries than this per call (a decode step's 3): the 8-lane loops.
constexpr int64_t kMinQueries512 = 8;

// Codeword pair p of one key row (offsets from key_word_offsets): word(code 2p) in lanes 0-3,
// word(code 2p + 1) in lanes 4-7.
HWY_INLINE __m256 key_word_pair(const float* words, const uint32_t* off, int p) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(words + off[2 * p])),
                              _mm_loadu_ps(words + off[2 * p + 1]), 1);
}

// NQ queries (duplicated, 128 floats apart) against one row pair: each query's 16 lanes of
// partial sums to out + r * 64.
template <int NQ>
HWY_INLINE void score_row_pair(const __m512* cw, const float* qdup, float* out) {
  __m512 a[NQ];
  for (int r = 0; r < NQ; ++r) a[r] = _mm512_setzero_ps();
  for (int p = 0; p < codeword_detail::kKeyCodes / 2; ++p) {
    for (int r = 0; r < NQ; ++r) a[r] = _mm512_fmadd_ps(_mm512_load_ps(qdup + r * 128 + 16 * p), cw[p], a[r]);
  }
  for (int r = 0; r < NQ; ++r) _mm512_store_ps(out + r * 64, a[r]);
}

HWY_INLINE void score_keys512(const CodewordKeys& k, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                              int64_t ld) {
  alignas(64) float qdup[kQueries512 * 128];
  alignas(64) float partial[kQueries512 * 64];       // [query][row pair s][16 lanes]
  alignas(16) static const float kZeroWord[4] = {};  // the words of a row past n_rows
  for (int64_t q0 = 0; q0 < n_q; q0 += kQueries512) {
    const int64_t nq = std::min(kQueries512, n_q - q0);
    for (int64_t r = 0; r < nq; ++r) {
      for (int p = 0; p < 8; ++p) {
        const __m256 x = _mm256_loadu_ps(q + (q0 + r) * q_stride + 8 * p);
        _mm512_store_ps(qdup + r * 128 + 16 * p, _mm512_insertf32x8(_mm512_castps256_ps512(x), x, 1));
      }
    }
    for (int64_t j0 = 0; j0 < k.n_rows; j0 += 8) {
      const int64_t m = std::min<int64_t>(8, k.n_rows - j0);
      for (int s = 0; s < 4; ++s) {
        uint32_t off[2][codeword_detail::kKeyCodes] = {};
        const float* base[2] = {kZeroWord, kZeroWord};
        for (int half = 0; half < 2; ++half) {
          if (s + 4 * half >= m) continue;
          codeword_detail::key_word_offsets(k.codes + (j0 + s + 4 * half) * k.code_stride, off[half]);
          base[half] = k.words;
        }
        __m512 cw[codeword_detail::kKeyCodes / 2];
        for (int p = 0; p < codeword_detail::kKeyCodes / 2; ++p) {
          cw[p] = _mm512_insertf32x8(_mm512_castps256_ps512(key_word_pair(base[0], off[0], p)),
                                     key_word_pair(base[1], off[1], p), 1);
        }
        float* ps = partial + 16 * s;
        int64_t r = 0;
        for (; r + 4 <= nq; r += 4) score_row_pair<4>(cw, qdup + r * 128, ps + r * 64);
        switch (nq - r) {
          case 3:
            score_row_pair<3>(cw, qdup + r * 128, ps + r * 64);
            break;
          case 2:
            score_row_pair<2>(cw, qdup + r * 128, ps + r * 64);
            break;
          case 1:
            score_row_pair<1>(cw, qdup + r * 128, ps + r * 64);
            break;
          default:
            break;
        }
      }
      // Per query: the 8-lane transposed sum of rows 0-3 (block 0 first halves, block 1 second
      // halves) and rows 4-7 (blocks 2, 3); two queries' halves added by one pair of shuffles.
      const auto reduce = [&](int64_t r) {
        const float* pr = partial + r * 64;
        return sum_quads512(_mm512_load_ps(pr), _mm512_load_ps(pr + 16), _mm512_load_ps(pr + 32),
                            _mm512_load_ps(pr + 48));
      };
      for (int64_t r = 0; r < nq; r += 2) {
        const bool two = r + 1 < nq;
        const __m512 x = reduce(r), y = two ? reduce(r + 1) : x;
        const __m512 sums = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
        float* out = scores + (q0 + r) * ld + j0;
        if (m == 8) {
          _mm256_storeu_ps(out, _mm512_castps512_ps256(sums));
          if (two) _mm256_storeu_ps(out + ld, _mm512_extractf32x8_ps(sums, 1));
        } else {
          alignas(64) float tmp[16];
          _mm512_store_ps(tmp, sums);
          std::copy_n(tmp, m, out);
          if (two) std::copy_n(tmp + 8, m, out + ld);
        }
      }
    }
  }
}

// NQ queries x C position pairs [t0 + 2c, t0 + 2c + 2) of accumulators in registers while every
// row passes.
template <int NQ, int C>
HWY_INLINE void accumulate_position_pairs(const CodewordValues& v, int t0, const float* w, int64_t ld, float* acc,
                                          int64_t acc_stride) {
  constexpr int64_t kEntries8 = int64_t{codeword_detail::kEntries} * 8;  // floats per position's book
  __m512 a[NQ][C];
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_loadu_ps(acc + r * acc_stride + 8 * (t0 + 2 * int64_t{c}));
  }
  const float* books = v.words + t0 * kEntries8;
  for (int64_t j = 0; j < v.n_rows; ++j) {
    const uint8_t* codes = v.codes + j * v.code_stride + t0;
    __m512 x[C];
    for (int c = 0; c < C; ++c) {
      const float* lo = books + 2 * c * kEntries8 + int64_t{codes[2 * c]} * 8;
      const float* hi = books + (2 * c + 1) * kEntries8 + int64_t{codes[2 * c + 1]} * 8;
      x[c] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(lo)), _mm256_loadu_ps(hi), 1);
    }
    for (int r = 0; r < NQ; ++r) {
      const __m512 wj = _mm512_set1_ps(w[r * ld + j]);
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(wj, x[c], a[r][c]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + r * acc_stride + 8 * (t0 + 2 * int64_t{c}), a[r][c]);
  }
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // VELOXQUANT_ATTENTION_CODEWORD_ROWS512_INL_H_
