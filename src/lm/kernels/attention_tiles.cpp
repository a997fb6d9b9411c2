// Highway's foreach_target re-includes this file once per SIMD target; HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled target on first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/attention_tiles.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <limits>

#include "base/half.h"
#include "lm/kernels/attention_tiles.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::tiles {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 8 lanes: a pass scores as many rows as a vector has lanes, each row with its own
// accumulator, and 8 accumulators plus the query vector fit AVX2's 16 registers.
using DF = hn::CappedTag<float, 8>;

#if HWY_TARGET != HWY_SCALAR
// Lane k of the result = sum of the lanes of a[k], for 4 vectors of 4 lanes or 8 of 8. Two
// interleave-and-add rounds sum within each 128-bit block; with 8 lanes a final round adds
// the two blocks. About 1.5 instructions per row instead of a 6-instruction reduction each.
template <class D>
HWY_INLINE hn::Vec<D> sum_lanes_transposed(D d, const hn::Vec<D>* a) {
  const hn::Repartition<uint64_t, D> d64;
  const auto pair_sums = [&](hn::Vec<D> x, hn::Vec<D> y) {
    return hn::Add(hn::InterleaveLower(d, x, y), hn::InterleaveUpper(d, x, y));
  };
  const auto quad_sums = [&](hn::Vec<D> x, hn::Vec<D> y) {
    const auto x64 = hn::BitCast(d64, x), y64 = hn::BitCast(d64, y);
    return hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, x64, y64)),
                   hn::BitCast(d, hn::InterleaveUpper(d64, x64, y64)));
  };
  const auto s0123 = quad_sums(pair_sums(a[0], a[1]), pair_sums(a[2], a[3]));
  if constexpr (hn::MaxLanes(D()) == 4) {
    return s0123;
  } else {
    const auto s4567 = quad_sums(pair_sums(a[4], a[5]), pair_sums(a[6], a[7]));
    return hn::Add(hn::ConcatLowerLower(d, s4567, s0123), hn::ConcatUpperUpper(d, s4567, s0123));
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
      for (int k = 0; k < L; ++k) out[j + k] += q[e] * r0[k * row_stride + e];
    }
  }
  for (; j < n_rows; ++j) {
    const float* r = rows + j * row_stride;
    auto acc = hn::Zero(df);
    for (int64_t e = 0; e < dv; e += L) acc = hn::MulAdd(hn::LoadU(df, q + e), hn::LoadU(df, r + e), acc);
    float s = hn::GetLane(hn::SumOfLanes(df, acc));
    for (int64_t e = dv; e < d; ++e) s += q[e] * r[e];
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

// NQ (<= 3) accumulator rows x V vectors of columns held in registers across all rows of the
// tile: each row's V vectors are loaded once for the NQ queries, and one broadcast weight
// feeds the row's V vectors.
template <int NQ, int V, class T>
HWY_INLINE void accumulate_columns(const float* w, int64_t ld, const T* rows, int64_t row_stride, int64_t n_rows,
                                   int64_t e, float* acc, int64_t acc_stride) {
  const DF df;
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
  hn::Vec<DF> a[NQ][V];
  for (int r = 0; r < NQ; ++r) {
    for (int c = 0; c < V; ++c) a[r][c] = hn::LoadU(df, acc + r * acc_stride + e + c * L);
  }
#pragma GCC unroll 2
  for (int64_t j = 0; j < n_rows; ++j) {
    const T* row = rows + j * row_stride + e;
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

HWY_INLINE float to_f32(float x) { return x; }
HWY_INLINE float to_f32(uint16_t h) { return base::f16_to_f32(h); }

template <int NQ, class T>
void AccumulateBlock(const float* w, int64_t ld, const T* rows, int64_t row_stride, int64_t n_rows, int64_t d,
                     float* acc, int64_t acc_stride) {
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
  // As wide as the registers allow: 3 queries x 3 vectors (+3 row vectors + the weight) or
  // 2 x 4; then narrower passes for the rest.
  constexpr int V = NQ >= 3 ? 3 : 4;
  int64_t e = 0;
  for (; e + V * L <= d; e += V * L) accumulate_columns<NQ, V>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride);
  for (; e + 2 * L <= d; e += 2 * L) accumulate_columns<NQ, 2>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride);
  for (; e + L <= d; e += L) accumulate_columns<NQ, 1>(w, ld, rows, row_stride, n_rows, e, acc, acc_stride);
  for (; e < d; ++e) {
    for (int r = 0; r < NQ; ++r) {
      float s = acc[r * acc_stride + e];
      for (int64_t j = 0; j < n_rows; ++j) s += w[r * ld + j] * to_f32(rows[j * row_stride + e]);
      acc[r * acc_stride + e] = s;
    }
  }
}

template <class T>
void accumulate_blocks(const float* w, int64_t ld, int64_t n_q, const T* rows, int64_t row_stride, int64_t n_rows,
                       int64_t d, float* acc, int64_t acc_stride) {
  int64_t r = 0;
  // Blocks of 3 queries (a GQA group of 3 in one pass): 9 accumulators, 3 row vectors and the
  // broadcast weight within AVX2's 16 registers.
  for (; r + 3 <= n_q; r += 3)
    AccumulateBlock<3>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride);
  switch (n_q - r) {
    case 2:
      AccumulateBlock<2>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride);
      break;
    case 1:
      AccumulateBlock<1>(w + r * ld, ld, rows, row_stride, n_rows, d, acc + r * acc_stride, acc_stride);
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
                       int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
  accumulate_blocks(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
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
HWY_EXPORT(AccumulateRows);
HWY_EXPORT(AccumulateRowsF16);
HWY_EXPORT(ScaleAndMax);
HWY_EXPORT(TargetName);

void score_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                int64_t d, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreRows)(q, q_stride, n_q, rows, row_stride, n_rows, d, scores, ld);
}

void accumulate_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                     int64_t d, float* acc, int64_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(AccumulateRows)(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
}

void accumulate_rows_f16(const float* w, int64_t ld, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                         int64_t n_rows, int64_t d, float* acc, int64_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(AccumulateRowsF16)(w, ld, n_q, rows, row_stride, n_rows, d, acc, acc_stride);
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
