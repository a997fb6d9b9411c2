// Highway's foreach_target re-includes this file once per SIMD target; HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled target on first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/attention_tiles.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "base/half.h"
#include "lm/kernels/attention_tiles.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::tiles {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 8 lanes: a pass scores as many rows as a vector has lanes, each row with its own
// accumulator, and 8 accumulators plus the query vector fit AVX2's 16 registers.
using DF = hn::CappedTag<float, 8>;

// Row element types the accumulation reads: f32 tiles, or a cache's f16 rows widened in
// registers (no f32 copy of the value tile).
template <class T>
HWY_INLINE hn::Vec<DF> load_row(const T* p) {
  const DF df;
  if constexpr (sizeof(T) == 2) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {
    return hn::LoadU(df, p);
  }
}

// Software prefetch of the bytes [p, p + bytes) (one hint per 64-byte line): the decode kernels
// ask for rows a fixed distance ahead of the ones they compute on, so a row's cache lines are
// on their way while earlier rows are scored or summed. The hardware streamers alone restart at
// every 4 KiB page and leave the core waiting on DRAM between bursts of compute. A prefetch
// never faults, so running past the last row is harmless.
HWY_INLINE void prefetch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) hwy::Prefetch(c + b);
}

// One row of `bytes` >= 1: the first two lines without a loop (a 64-element f16 row is exactly
// two), any further ones in one.
HWY_INLINE void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  hwy::Prefetch(c);
  hwy::Prefetch(c + 64);
  for (int64_t b = 128; b < bytes; b += 64) hwy::Prefetch(c + b);
}

// c + a * b with one rounding, spelled out: whether the compiler contracts a plain `c += a * b`
// into an FMA varies from one loop to the next, and the f32 and f16 scorers must sum their
// remainder elements identically (as must the f32 and f16 value accumulations).
HWY_INLINE float fused_add(float a, float b, float c) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(hn::MulAdd(hn::Set(d1, a), hn::Set(d1, b), hn::Set(d1, c)));
}

#if HWY_TARGET != HWY_SCALAR
// Lane k of the result = sum of the lanes of a[k], for 4 vectors of 4 lanes or 8 of 8. Two
// interleave-and-add rounds sum within each 128-bit block; with 8 lanes a final round adds
// the two blocks. About 1.5 instructions per row instead of a 6-instruction reduction each.
// The first two rounds for four vectors: lane k of each 128-bit block = that block's sum of a[k].
template <class D>
HWY_INLINE hn::Vec<D> sum_quads(D d, hn::Vec<D> a0, hn::Vec<D> a1, hn::Vec<D> a2, hn::Vec<D> a3) {
  const hn::Repartition<uint64_t, D> d64;
  const auto pair_sums = [&](hn::Vec<D> x, hn::Vec<D> y) {
    return hn::Add(hn::InterleaveLower(d, x, y), hn::InterleaveUpper(d, x, y));
  };
  const auto quad_sums = [&](hn::Vec<D> x, hn::Vec<D> y) {
    const auto x64 = hn::BitCast(d64, x), y64 = hn::BitCast(d64, y);
    return hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, x64, y64)),
                   hn::BitCast(d, hn::InterleaveUpper(d64, x64, y64)));
  };
  return quad_sums(pair_sums(a0, a1), pair_sums(a2, a3));
}

// The final round for 8 lanes: the two blocks of rows 0-3 and 4-7 added.
template <class D>
HWY_INLINE hn::Vec<D> add_blocks(D d, hn::Vec<D> s0123, hn::Vec<D> s4567) {
  return hn::Add(hn::ConcatLowerLower(d, s4567, s0123), hn::ConcatUpperUpper(d, s4567, s0123));
}

template <class D>
HWY_INLINE hn::Vec<D> sum_lanes_transposed(D d, const hn::Vec<D>* a) {
  const auto s0123 = sum_quads(d, a[0], a[1], a[2], a[3]);
  if constexpr (hn::MaxLanes(D()) == 4) {
    return s0123;
  } else {
    return add_blocks(d, s0123, sum_quads(d, a[4], a[5], a[6], a[7]));
  }
}

// One query against rows [0, n_rows) whole passes of L rows, the rest row by row.
// DK > 0: the head dimension known at compile time, so the pass is one straight run of loads
// and FMAs (loop control was a quarter of the instructions).
template <int L, int DK>
HWY_INLINE void score_query(const float* q, const float* rows, int64_t row_stride, int64_t n_rows, int64_t d_runtime,
                            float* out) {
  const DF df;
  const int64_t d = DK > 0 ? DK : d_runtime;
  const int64_t dv = d - d % L;
  int64_t j = 0;
  for (; j + L <= n_rows; j += L) {
    const float* r0 = rows + j * row_stride;
    hn::Vec<DF> acc[L];
    for (int k = 0; k < L; ++k) acc[k] = hn::Zero(df);
#pragma GCC unroll 16
    for (int64_t e = 0; e < dv; e += L) {
      const auto qv = hn::LoadU(df, q + e);
      for (int k = 0; k < L; ++k) acc[k] = hn::MulAdd(qv, hn::LoadU(df, r0 + k * row_stride + e), acc[k]);
    }
    hn::StoreU(sum_lanes_transposed(df, acc), df, out + j);
    for (int64_t e = dv; e < d; ++e) {
      for (int k = 0; k < L; ++k) out[j + k] = fused_add(q[e], r0[k * row_stride + e], out[j + k]);
    }
  }
  for (; j < n_rows; ++j) {
    const float* r = rows + j * row_stride;
    auto acc = hn::Zero(df);
    for (int64_t e = 0; e < dv; e += L) acc = hn::MulAdd(hn::LoadU(df, q + e), hn::LoadU(df, r + e), acc);
    float s = hn::GetLane(hn::SumOfLanes(df, acc));
    for (int64_t e = dv; e < d; ++e) s = fused_add(q[e], r[e], s);
    out[j] = s;
  }
}

#endif  // HWY_TARGET != HWY_SCALAR

void ScoreRows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
               int64_t d, float* scores, int64_t ld) {
#if HWY_TARGET != HWY_SCALAR
  constexpr int kLanes = static_cast<int>(hn::MaxLanes(DF()));
  if constexpr (kLanes == 4 || kLanes == 8) {
    // Queries inner: the L rows of a pass (at most 8 x d floats) stay in L1 for all of them.
    for (int64_t r = 0; r < n_q; ++r) {
      const float* qr = q + r * q_stride;
      float* out = scores + r * ld;
      if (d == 64) {
        score_query<kLanes, 64>(qr, rows, row_stride, n_rows, d, out);
      } else if (d == 128) {
        score_query<kLanes, 128>(qr, rows, row_stride, n_rows, d, out);
      } else {
        score_query<kLanes, 0>(qr, rows, row_stride, n_rows, d, out);
      }
    }
    return;
  }
#endif
  {
    for (int64_t r = 0; r < n_q; ++r) {
      for (int64_t j = 0; j < n_rows; ++j) {
        float s = 0.0f;
        for (int64_t e = 0; e < d; ++e) s += q[r * q_stride + e] * rows[j * row_stride + e];
        scores[r * ld + j] = s;
      }
    }
  }
}

#if HWY_TARGET != HWY_SCALAR
// NQ (1..3) queries against 8 f16 rows per pass, each row chunk widened once in registers and
// fed to all NQ queries: 4 rows x NQ accumulators at a time (12 + the row fit AVX2's 16
// registers), the two halves' partial sums joined as sum_lanes_transposed joins them. Every
// (query, row) sum runs the same FMA chain over e and the same reduction tree as score_query<8>
// on the widened rows, so the scores are bit-identical to ScoreRows after an f32 copy.
template <int NQ, int DK>
HWY_INLINE void score_group_f16(const float* q, int64_t q_stride, const uint16_t* rows, int64_t row_stride,
                                int64_t n_rows, int64_t d_runtime, float* out, int64_t ld, int64_t ahead) {
  const DF df;
  constexpr int64_t L = 8;
  const int64_t d = DK > 0 ? DK : d_runtime;
  const int64_t dv = d - d % L;
  // With the head dimension known, the queries are first copied to a local array: `out` cannot
  // alias it, so the compiler reads the query chunks as FMA operands where they lie instead of
  // re-copying them for every pass (as it must when a store to `out` might have changed them).
  constexpr int64_t kLocal = DK > 0 ? NQ * DK : 1;
  HWY_ALIGN float q_local[kLocal];
  const float* qq = q;
  int64_t qs = q_stride;
  if constexpr (DK > 0) {
    for (int h = 0; h < NQ; ++h) std::copy_n(q + h * q_stride, DK, q_local + h * DK);
    qq = q_local;
    qs = DK;
  }
  int64_t j = 0;
  for (; j + L <= n_rows; j += L) {
    const uint16_t* r0 = rows + j * row_stride;
    if (ahead > 0) {
      const uint16_t* p = r0 + ahead * row_stride;
      if (DK > 0 && row_stride == DK) {
        // Back-to-back rows of a known width: a fixed run of hints the compiler unrolls.
        constexpr int64_t kLines = DK > 0 ? L * DK * 2 / 64 : 1;
#pragma GCC unroll 32
        for (int64_t l = 0; l < kLines; ++l) hwy::Prefetch(reinterpret_cast<const char*>(p) + 64 * l);
      } else {
        prefetch_bytes(p, L * row_stride * 2);
      }
    }
    hn::Vec<DF> low[NQ];
    for (int64_t half = 0; half < 2; ++half) {
      const uint16_t* rh = r0 + half * 4 * row_stride;
      hn::Vec<DF> acc[NQ][4];
      // The first chunk's product starts each sum (a product plus +0 rounds to the product; only
      // the sign of an exact zero can differ, which no later step sees).
      if (dv > 0) {
        for (int k = 0; k < 4; ++k) {
          const auto x = load_row(rh + k * row_stride);
          for (int h = 0; h < NQ; ++h) acc[h][k] = hn::Mul(hn::LoadU(df, qq + h * qs), x);
        }
      } else {
        for (int h = 0; h < NQ; ++h) {
          for (int k = 0; k < 4; ++k) acc[h][k] = hn::Zero(df);
        }
      }
#pragma GCC unroll 16
      for (int64_t e = L; e < dv; e += L) {
        for (int k = 0; k < 4; ++k) {
          const auto x = load_row(rh + k * row_stride + e);
          for (int h = 0; h < NQ; ++h) acc[h][k] = hn::MulAdd(hn::LoadU(df, qq + h * qs + e), x, acc[h][k]);
        }
      }
      for (int h = 0; h < NQ; ++h) {
        const auto sums = sum_quads(df, acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        if (half == 0) {
          low[h] = sums;
        } else {
          hn::StoreU(add_blocks(df, low[h], sums), df, out + h * ld + j);
        }
      }
    }
    for (int64_t e = dv; e < d; ++e) {
      for (int h = 0; h < NQ; ++h) {
        for (int k = 0; k < L; ++k) {
          float& o = out[h * ld + j + k];
          o = fused_add(qq[h * qs + e], base::f16_to_f32(r0[k * row_stride + e]), o);
        }
      }
    }
  }
  for (; j < n_rows; ++j) {
    const uint16_t* r = rows + j * row_stride;
    for (int h = 0; h < NQ; ++h) {
      const float* qh = qq + h * qs;
      auto acc = hn::Zero(df);
      for (int64_t e = 0; e < dv; e += L) acc = hn::MulAdd(hn::LoadU(df, qh + e), load_row(r + e), acc);
      float s = hn::GetLane(hn::SumOfLanes(df, acc));
      for (int64_t e = dv; e < d; ++e) s = fused_add(qh[e], base::f16_to_f32(r[e]), s);
      out[h * ld + j] = s;
    }
  }
}

template <int DK>
HWY_INLINE void score_groups_f16(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* rows,
                                 int64_t row_stride, int64_t n_rows, int64_t d, float* scores, int64_t ld,
                                 int64_t ahead) {
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3)
    score_group_f16<3, DK>(q + r * q_stride, q_stride, rows, row_stride, n_rows, d, scores + r * ld, ld,
                           r == 0 ? ahead : 0);
  if (n_q - r == 2) {
    score_group_f16<2, DK>(q + r * q_stride, q_stride, rows, row_stride, n_rows, d, scores + r * ld, ld,
                           r == 0 ? ahead : 0);
  }
  if (n_q - r == 1) {
    score_group_f16<1, DK>(q + r * q_stride, q_stride, rows, row_stride, n_rows, d, scores + r * ld, ld,
                           r == 0 ? ahead : 0);
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

void ScoreRowsF16(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                  int64_t n_rows, int64_t d, float* scores, int64_t ld, int64_t prefetch_rows) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (hn::MaxLanes(DF()) == 8) {
    if (d == 64) {
      score_groups_f16<64>(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld, prefetch_rows);
    } else if (d == 128) {
      score_groups_f16<128>(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld, prefetch_rows);
    } else {
      score_groups_f16<0>(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld, prefetch_rows);
    }
    return;
  }
#endif
  // Narrower targets: widen 8 rows at a time and score them as f32. 8 is a multiple of every
  // pass width, so the passes and the row-by-row remainder fall as on the whole tile.
  thread_local std::vector<float> widened;
  widened.resize(static_cast<std::size_t>(8 * d));
  for (int64_t j0 = 0; j0 < n_rows; j0 += 8) {
    const int64_t n = std::min<int64_t>(8, n_rows - j0);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t e = 0; e < d; ++e) widened[j * d + e] = base::f16_to_f32(rows[(j0 + j) * row_stride + e]);
    }
    ScoreRows(q, q_stride, n_q, widened.data(), d, n, d, scores + j0, ld);
  }
}

// NQ (<= 3) accumulator rows x V vectors of columns held in registers across all rows of the
// tile: each row's V vectors are loaded once for the NQ queries, and one broadcast weight
// feeds the row's V vectors.
template <int NQ, int V, bool kPrefetch = false, class T>
HWY_INLINE void accumulate_columns(const float* w, int64_t ld, const T* rows, int64_t row_stride, int64_t n_rows,
                                   int64_t e, float* acc, int64_t acc_stride, int64_t ahead = 0) {
  const DF df;
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
  hn::Vec<DF> a[NQ][V];
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < V; ++c) a[r][c] = hn::LoadU(df, acc + r * acc_stride + e + c * L);
  }
#pragma GCC unroll 2
  for (int64_t j = 0; j < n_rows; ++j) {
    const T* row = rows + j * row_stride + e;
    if constexpr (kPrefetch) prefetch_row(row + ahead * row_stride, row_stride * static_cast<int64_t>(sizeof(T)));
    hn::Vec<DF> x[V];
    for (int c = 0; c < V; ++c) x[c] = load_row(row + c * L);
    for (int r = 0; r < NQ; ++r) {
      const auto wj = hn::Set(df, w[r * ld + j]);
      for (int c = 0; c < V; ++c) a[r][c] = hn::MulAdd(wj, x[c], a[r][c]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < V; ++c) hn::StoreU(a[r][c], df, acc + r * acc_stride + e + c * L);
  }
}

// 3 queries x 4 vectors of columns: the row's three weights are broadcast first and each row
// vector is widened just before its three FMAs, so 12 accumulators + 3 weights + 1 row vector
// fill AVX2's 16 registers exactly. Two passes cover d = 64 (6 broadcasts per row instead of the
// 3 x 3 vector layout's 9 over three passes). Each accumulator takes the same FMA per row, in
// row order, as accumulate_columns: the sums are bit-identical.
template <bool kPrefetch, class T>
HWY_INLINE void accumulate_columns_3x4(const float* w, int64_t ld, const T* rows, int64_t row_stride, int64_t n_rows,
                                       int64_t e, float* acc, int64_t acc_stride, int64_t ahead) {
  const DF df;
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
  hn::Vec<DF> a0[4], a1[4], a2[4];
  for (int c = 0; c < 4; ++c) {
    a0[c] = hn::LoadU(df, acc + e + c * L);
    a1[c] = hn::LoadU(df, acc + acc_stride + e + c * L);
    a2[c] = hn::LoadU(df, acc + 2 * acc_stride + e + c * L);
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    const T* row = rows + j * row_stride + e;
    if constexpr (kPrefetch) prefetch_row(row + ahead * row_stride, row_stride * static_cast<int64_t>(sizeof(T)));
    const auto w0 = hn::Set(df, w[j]), w1 = hn::Set(df, w[ld + j]), w2 = hn::Set(df, w[2 * ld + j]);
    for (int c = 0; c < 4; ++c) {
      const auto x = load_row(row + c * L);
      a0[c] = hn::MulAdd(w0, x, a0[c]);
      a1[c] = hn::MulAdd(w1, x, a1[c]);
      a2[c] = hn::MulAdd(w2, x, a2[c]);
    }
  }
  for (int c = 0; c < 4; ++c) {
    hn::StoreU(a0[c], df, acc + e + c * L);
    hn::StoreU(a1[c], df, acc + acc_stride + e + c * L);
    hn::StoreU(a2[c], df, acc + 2 * acc_stride + e + c * L);
  }
}

HWY_INLINE float to_f32(float x) { return x; }
HWY_INLINE float to_f32(uint16_t h) { return base::f16_to_f32(h); }

template <int NQ, class T>
void AccumulateBlock(const float* w, int64_t ld, const T* rows, int64_t row_stride, int64_t n_rows, int64_t d,
                     float* acc, int64_t acc_stride, int64_t ahead = 0) {
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
  // As wide as the registers allow: 3 queries x 3 vectors (+3 row vectors + the weight) or
  // 2 x 4; then narrower passes for the rest.
  constexpr int V = NQ >= 3 ? 3 : 4;
  int64_t e = 0;
  if constexpr (NQ == 3 && L == 8) {
    // The first pass over the rows prefetches `ahead` rows on (the later passes read lines it
    // already brought in).
    for (; e + 4 * L <= d; e += 4 * L) {
      if (e == 0 && ahead > 0) {
        accumulate_columns_3x4<true>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, ahead);
      } else {
        accumulate_columns_3x4<false>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, 0);
      }
    }
  }
  for (; e + V * L <= d; e += V * L) {
    if (e == 0 && ahead > 0) {
      accumulate_columns<NQ, V, true>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride, ahead);
    } else {
      accumulate_columns<NQ, V>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride);
    }
  }
  for (; e + 2 * L <= d; e += 2 * L) accumulate_columns<NQ, 2>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride);
  for (; e + L <= d; e += L) accumulate_columns<NQ, 1>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride);
  for (; e < d; ++e) {
    for (int r = 0; r < NQ; ++r) {
      float s = acc[r * acc_stride + e];
      for (int64_t j = 0; j < n_rows; ++j) s = fused_add(w[r * ld + j], to_f32(rows[j * row_stride + e]), s);
      acc[r * acc_stride + e] = s;
    }
  }
}

template <class T>
void accumulate_blocks(const float* w, int64_t ld, int64_t n_q, const T* rows, int64_t row_stride, int64_t n_rows,
                       int64_t d, float* acc, int64_t acc_stride, int64_t ahead = 0) {
  int64_t r = 0;
  // Blocks of 3 queries (a GQA group of 3 in one pass): 9 accumulators, 3 row vectors and the
  // broadcast weight within AVX2's 16 registers.
  // Only the first block prefetches: the later ones read the rows it brought in.
  for (; r + 3 <= n_q; r += 3) {
    AccumulateBlock<3>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride,
                       r == 0 ? ahead : 0);
  }
  switch (n_q - r) {
    case 2:
      AccumulateBlock<2>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride,
                         r == 0 ? ahead : 0);
      break;
    case 1:
      AccumulateBlock<1>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride,
                         r == 0 ? ahead : 0);
      break;
    default:
      break;
  }
}

void AccumulateRows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                    int64_t d, float* acc, int64_t acc_stride) {
  accumulate_blocks(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
}

void AccumulateRowsF16(const float* w, int64_t ld, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                       int64_t n_rows, int64_t d, float* acc, int64_t acc_stride, int64_t prefetch_rows) {
  accumulate_blocks(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride, prefetch_rows);
}

float ScaleAndMax(float* s, int64_t n, float scale) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  auto vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto x = hn::Mul(hn::LoadU(df, s + i), vs);
    hn::StoreU(x, df, s + i);
    vmax = hn::Max(vmax, x);
  }
  float m = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; i < n; ++i) {
    s[i] *= scale;
    m = std::max(m, s[i]);
  }
  return m;
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::tiles
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lm::kernels::tiles {
HWY_EXPORT(ScoreRows);
HWY_EXPORT(ScoreRowsF16);
HWY_EXPORT(AccumulateRows);
HWY_EXPORT(AccumulateRowsF16);
HWY_EXPORT(ScaleAndMax);
HWY_EXPORT(TargetName);

void score_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                int64_t d, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreRows)(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld);
}

void score_rows_f16(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                    int64_t n_rows, int64_t d, float* scores, int64_t ld, int64_t prefetch_rows) {
  HWY_DYNAMIC_DISPATCH(ScoreRowsF16)(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld, prefetch_rows);
}

void accumulate_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                     int64_t d, float* acc, int64_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(AccumulateRows)(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
}

void accumulate_rows_f16(const float* w, int64_t ld, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                         int64_t n_rows, int64_t d, float* acc, int64_t acc_stride, int64_t prefetch_rows) {
  HWY_DYNAMIC_DISPATCH(AccumulateRowsF16)(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride, prefetch_rows);
}

float scale_and_max(float* s, int64_t n, float scale) { return HWY_DYNAMIC_DISPATCH(ScaleAndMax)(s, n, scale); }

const char* target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

namespace scalar {
void score_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                int64_t d, float* scores, int64_t ld) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      float s = 0.0f;
      for (int64_t e = 0; e < d; ++e) s += q[r * q_stride + e] * rows[j * row_stride + e];
      scores[r * ld + j] = s;
    }
  }
}

void score_rows_f16(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                    int64_t n_rows, int64_t d, float* scores, int64_t ld) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      float s = 0.0f;
      for (int64_t e = 0; e < d; ++e) s += q[r * q_stride + e] * base::f16_to_f32(rows[j * row_stride + e]);
      scores[r * ld + j] = s;
    }
  }
}

void accumulate_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                     int64_t d, float* acc, int64_t acc_stride) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      for (int64_t e = 0; e < d; ++e) acc[r * acc_stride + e] += w[r * ld + j] * rows[j * row_stride + e];
    }
  }
}

void accumulate_rows_f16(const float* w, int64_t ld, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                         int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      for (int64_t e = 0; e < d; ++e)
        acc[r * acc_stride + e] += w[r * ld + j] * base::f16_to_f32(rows[j * row_stride + e]);
    }
  }
}

float scale_and_max(float* s, int64_t n, float scale) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i] *= scale);
  return m;
}
}  // namespace scalar
}  // namespace lm::kernels::tiles
#endif
