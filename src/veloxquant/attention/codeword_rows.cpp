// Highway kernels for codeword_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/codeword_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/codeword_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#ifndef VELOXQUANT_CODEWORD_ROWS_ONCE_
#define VELOXQUANT_CODEWORD_ROWS_ONCE_
namespace veloxquant::attention::kernels {
namespace codeword_detail {
constexpr int kKeyCodes = 16;  // codes per key row (head_dim 64 in 4-float codewords)
constexpr int kEntries = 256;  // value codewords per position

// The 16 12-bit codes of a 24-byte key row, each times 4 (its first float in the book): four
// 64-bit loads that stay inside the row (the last one starts 2 bytes early and drops them).
inline void key_word_offsets(const uint8_t* row, uint32_t* off) {
  uint64_t w[4];
  std::memcpy(&w[0], row, 8);
  std::memcpy(&w[1], row + 6, 8);
  std::memcpy(&w[2], row + 12, 8);
  std::memcpy(&w[3], row + 16, 8);
  w[3] >>= 16;
  for (int g = 0; g < 4; ++g) {
    for (int k = 0; k < 4; ++k) off[4 * g + k] = static_cast<uint32_t>((w[g] >> (12 * k)) & 0xfffu) * 4u;
  }
}
}  // namespace codeword_detail
}  // namespace veloxquant::attention::kernels
#endif

#include "veloxquant/attention/codeword_rows512-inl.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using codeword_detail::kEntries;
using codeword_detail::kKeyCodes;

#if HWY_TARGET != HWY_SCALAR
using DF = hn::CappedTag<float, 8>;

bool SupportedImpl() { return hn::MaxLanes(DF()) == 8; }

// Lane k of the result = sum of the lanes of a[k] (8 vectors of 8 lanes), in the order of
// lm/kernels/attention_tiles' transposed sum: ((x0 + x2) + (x1 + x3)) + ((x4 + x6) + (x5 + x7)).
HWY_INLINE hn::Vec<DF> sum_lanes_transposed(const float* a) {
  const DF d;
  const hn::Repartition<uint64_t, DF> d64;
  const auto pair_sums = [&](hn::Vec<DF> x, hn::Vec<DF> y) {
    return hn::Add(hn::InterleaveLower(d, x, y), hn::InterleaveUpper(d, x, y));
  };
  const auto quad_sums = [&](hn::Vec<DF> x, hn::Vec<DF> y) {
    const auto x64 = hn::BitCast(d64, x), y64 = hn::BitCast(d64, y);
    return hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, x64, y64)),
                   hn::BitCast(d, hn::InterleaveUpper(d64, x64, y64)));
  };
  const auto row = [&](int k) { return hn::Load(d, a + int64_t{8} * k); };
  const auto s0123 = quad_sums(pair_sums(row(0), row(1)), pair_sums(row(2), row(3)));
  const auto s4567 = quad_sums(pair_sums(row(4), row(5)), pair_sums(row(6), row(7)));
  return hn::Add(hn::ConcatLowerLower(d, s4567, s0123), hn::ConcatUpperUpper(d, s4567, s0123));
}

// Queries [q0, q0 + NQ) against one row whose 8 codeword pairs are in `cw`: the lane sums of
// each query go to partial[(r - q0) * 64 + slot * 8].
template <int NQ>
HWY_INLINE void score_row_queries(const hn::Vec<DF>* cw, const float* q, int64_t q_stride, float* partial) {
  const DF d;
  hn::Vec<DF> a[NQ];
  for (int r = 0; r < NQ; ++r) a[r] = hn::Zero(d);
  for (int p = 0; p < kKeyCodes / 2; ++p) {
    for (int r = 0; r < NQ; ++r) a[r] = hn::MulAdd(hn::LoadU(d, q + r * q_stride + int64_t{8} * p), cw[p], a[r]);
  }
  for (int r = 0; r < NQ; ++r) hn::Store(a[r], d, partial + r * int64_t{64});
}

// At most kMaxQueries queries per pass over the rows (their partial sums stay on the stack).
constexpr int64_t kMaxQueries = 16;

void ScoreKeysImpl(const CodewordKeys& k, const float* q, int64_t q_stride, int64_t n_q, float* scores, int64_t ld) {
  if constexpr (hn::MaxLanes(DF()) != 8) {  // callers check SupportedImpl; kept correct regardless
    return scalar::score_codeword_keys(k, q, q_stride, n_q, scores, ld);
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (n_q >= kMinQueries512) return score_keys512(k, q, q_stride, n_q, scores, ld);
#endif
  const DF d;
  const hn::Half<DF> dh;
  HWY_ALIGN float partial[kMaxQueries * 64];
  for (int64_t q0 = 0; q0 < n_q; q0 += kMaxQueries) {
    const int64_t nq = std::min(kMaxQueries, n_q - q0);
    const float* qb = q + q0 * q_stride;
    for (int64_t j0 = 0; j0 < k.n_rows; j0 += 8) {
      const int64_t m = std::min<int64_t>(8, k.n_rows - j0);
      for (int64_t s = 0; s < m; ++s) {
        uint32_t off[kKeyCodes];
        codeword_detail::key_word_offsets(k.codes + (j0 + s) * k.code_stride, off);
        hn::Vec<DF> cw[kKeyCodes / 2];
        for (int p = 0; p < kKeyCodes / 2; ++p) {
          cw[p] = hn::Combine(d, hn::LoadU(dh, k.words + off[2 * static_cast<int64_t>(p) + 1]),
                              hn::LoadU(dh, k.words + off[2 * static_cast<int64_t>(p)]));
        }
        float* ps = partial + s * 8;
        int64_t r = 0;
        for (; r + 3 <= nq; r += 3) score_row_queries<3>(cw, qb + r * q_stride, q_stride, ps + r * 64);
        if (nq - r == 2) score_row_queries<2>(cw, qb + r * q_stride, q_stride, ps + r * 64);
        if (nq - r == 1) score_row_queries<1>(cw, qb + r * q_stride, q_stride, ps + r * 64);
      }
      for (int64_t r = 0; r < nq; ++r) {
        float* pr = partial + r * 64;
        for (int64_t s = m; s < 8; ++s) hn::Store(hn::Zero(d), d, pr + s * 8);
        float* out = scores + (q0 + r) * ld + j0;
        const auto sums = sum_lanes_transposed(pr);
        if (m == 8) {
          hn::StoreU(sums, d, out);
        } else {
          HWY_ALIGN float tmp[8];
          hn::Store(sums, d, tmp);
          std::copy_n(tmp, m, out);
        }
      }
    }
  }
}

// NQ queries x C positions (8 floats each) of accumulators in registers while every row passes.
template <int NQ, int C>
HWY_INLINE void accumulate_positions(const CodewordValues& v, int t0, const float* w, int64_t ld, float* acc,
                                     int64_t acc_stride) {
  const DF d;
  hn::Vec<DF> a[NQ][C];
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < C; ++c) a[r][c] = hn::LoadU(d, acc + r * acc_stride + int64_t{8} * (t0 + c));
  }
  const float* books = v.words + int64_t{t0} * kEntries * 8;
  for (int64_t j = 0; j < v.n_rows; ++j) {
    const uint8_t* codes = v.codes + j * v.code_stride + t0;
    hn::Vec<DF> wj[NQ];
    for (int r = 0; r < NQ; ++r) wj[r] = hn::Set(d, w[r * ld + j]);
    for (int c = 0; c < C; ++c) {
      const auto x = hn::LoadU(d, books + (static_cast<int64_t>(c) * kEntries + codes[c]) * 8);
      for (int r = 0; r < NQ; ++r) a[r][c] = hn::MulAdd(wj[r], x, a[r][c]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < C; ++c) hn::StoreU(a[r][c], d, acc + r * acc_stride + int64_t{8} * (t0 + c));
  }
}

template <int NQ>
HWY_INLINE void accumulate_queries(const CodewordValues& v, const float* w, int64_t ld, float* acc,
                                   int64_t acc_stride) {
  int t = 0;
  for (; t + 4 <= v.positions; t += 4) accumulate_positions<NQ, 4>(v, t, w, ld, acc, acc_stride);
  for (; t < v.positions; ++t) accumulate_positions<NQ, 1>(v, t, w, ld, acc, acc_stride);
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Positions in pairs, 4 pairs (64 floats) per pass; an odd last position by the 8-lane loop.
template <int NQ>
HWY_INLINE void accumulate_queries512(const CodewordValues& v, const float* w, int64_t ld, float* acc,
                                      int64_t acc_stride) {
  int t = 0;
  for (; t + 8 <= v.positions; t += 8) accumulate_position_pairs<NQ, 4>(v, t, w, ld, acc, acc_stride);
  for (; t + 2 <= v.positions; t += 2) accumulate_position_pairs<NQ, 1>(v, t, w, ld, acc, acc_stride);
  for (; t < v.positions; ++t) accumulate_positions<NQ, 1>(v, t, w, ld, acc, acc_stride);
}

// 16-lane accumulators (codeword_rows512-inl.h), 6 queries x 4 position pairs in 24 registers, for
// calls of many queries (a prefill block's 48).
HWY_INLINE void accumulate_values512(const CodewordValues& v, const float* w, int64_t ld, int64_t n_q, float* acc,
                                     int64_t acc_stride) {
  int64_t r = 0;
  for (; r + 6 <= n_q; r += 6) accumulate_queries512<6>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
  switch (n_q - r) {
    case 5:
      return accumulate_queries512<5>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
    case 4:
      return accumulate_queries512<4>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
    case 3:
      return accumulate_queries512<3>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
    case 2:
      return accumulate_queries512<2>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
    case 1:
      return accumulate_queries512<1>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
    default:
      return;
  }
}
#endif

void AccumulateValuesImpl(const CodewordValues& v, const float* w, int64_t ld, int64_t n_q, float* acc,
                          int64_t acc_stride) {
  if constexpr (hn::MaxLanes(DF()) != 8) {
    return scalar::accumulate_codeword_values(v, w, ld, n_q, acc, acc_stride);
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // A decode step's 3 queries keep the 8-lane loop: 12 wide FMAs per row plus 4 inserts measured
  // no faster than 24 narrow ones here.
  if (n_q >= kMinQueries512) return accumulate_values512(v, w, ld, n_q, acc, acc_stride);
#endif
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) accumulate_queries<3>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
  if (n_q - r == 2) accumulate_queries<2>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
  if (n_q - r == 1) accumulate_queries<1>(v, w + r * ld, ld, acc + r * acc_stride, acc_stride);
}

#else   // HWY_SCALAR: the callers decode instead

bool SupportedImpl() { return false; }
void ScoreKeysImpl(const CodewordKeys& k, const float* q, int64_t q_stride, int64_t n_q, float* scores, int64_t ld) {
  scalar::score_codeword_keys(k, q, q_stride, n_q, scores, ld);
}
void AccumulateValuesImpl(const CodewordValues& v, const float* w, int64_t ld, int64_t n_q, float* acc,
                          int64_t acc_stride) {
  scalar::accumulate_codeword_values(v, w, ld, n_q, acc, acc_stride);
}
#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(SupportedImpl);
HWY_EXPORT(ScoreKeysImpl);
HWY_EXPORT(AccumulateValuesImpl);

bool codeword_rows_supported() { return HWY_DYNAMIC_DISPATCH(SupportedImpl)(); }

void score_codeword_keys(const CodewordKeys& k, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreKeysImpl)(k, q, q_stride, n_q, scores, ld);
}

void accumulate_codeword_values(const CodewordValues& v, const float* w, int64_t ld, int64_t n_q, float* acc,
                                int64_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(AccumulateValuesImpl)(v, w, ld, n_q, acc, acc_stride);
}

namespace scalar {
void score_codeword_keys(const CodewordKeys& k, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld) {
  for (int64_t j = 0; j < k.n_rows; ++j) {
    uint32_t off[codeword_detail::kKeyCodes];
    codeword_detail::key_word_offsets(k.codes + j * k.code_stride, off);
    for (int64_t r = 0; r < n_q; ++r) {
      const float* qr = q + r * q_stride;
      float a[8] = {};
      for (int p = 0; p < codeword_detail::kKeyCodes / 2; ++p) {
        for (int l = 0; l < 8; ++l) {
          const float word = k.words[off[2 * p + l / 4] + static_cast<uint32_t>(l % 4)];
          a[l] = std::fma(qr[8 * p + l], word, a[l]);
        }
      }
      scores[r * ld + j] = ((a[0] + a[2]) + (a[1] + a[3])) + ((a[4] + a[6]) + (a[5] + a[7]));
    }
  }
}

void accumulate_codeword_values(const CodewordValues& v, const float* w, int64_t ld, int64_t n_q, float* acc,
                                int64_t acc_stride) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < v.n_rows; ++j) {
      const float wj = w[r * ld + j];
      for (int t = 0; t < v.positions; ++t) {
        const float* word = v.words + (int64_t{t} * codeword_detail::kEntries + v.codes[j * v.code_stride + t]) * 8;
        for (int e = 0; e < 8; ++e)
          acc[r * acc_stride + int64_t{8} * t + e] = std::fma(wj, word[e], acc[r * acc_stride + int64_t{8} * t + e]);
      }
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
