// Highway kernels for integer_key_scores.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/integer_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/integer_key_scores.h"
#include "veloxquant/attention/integer_query_step.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

#include <algorithm>
#include <cmath>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Fused rather than fold_scales (tile_kernels.h) followed by a rounding pass: the separate
// passes cost 1.01M instructions of the kivi 4-bit decode bench's 8 steps at ctx 1024, this one
// 0.51M.
void FoldQueriesImpl(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, int32_t limit,
                     int16_t* q16, float* step, float* bias) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int16_t, decltype(di)> d16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t whole = d / lanes * lanes;
  for (int64_t r = 0; r < n_q; ++r) {
    const float* x = q + r * d;
    // One pass for the largest folded magnitude and the bias. The folded values' sum is
    // non-finite exactly when one of them is (or when finite ones overflow f32, far beyond
    // anything 16-bit steps could hold): Max alone would drop a NaN.
    auto vmax = hn::Zero(df), total = hn::Zero(df), vbias = hn::Zero(df);
    for (int64_t c = 0; c < whole; c += lanes) {
      const auto v = hn::LoadU(df, x + c);
      const auto folded = hn::Mul(v, hn::LoadU(df, scale + c));
      vmax = hn::Max(vmax, hn::Abs(folded));
      total = hn::Add(total, folded);
      vbias = hn::MulAdd(v, hn::LoadU(df, min + c), vbias);
    }
    float max_abs = hn::GetLane(hn::MaxOfLanes(df, vmax));
    float sum = hn::GetLane(hn::SumOfLanes(df, total));
    float b = hn::GetLane(hn::SumOfLanes(df, vbias));
    for (int64_t c = whole; c < d; ++c) {
      const float folded = x[c] * scale[c];
      max_abs = std::max(max_abs, std::fabs(folded));
      sum += folded;
      b += x[c] * min[c];
    }
    const QueryStep s = query_step(std::isfinite(sum) ? max_abs : std::numeric_limits<float>::quiet_NaN(), limit);
    step[r] = s.step;
    bias[r] = b;
    // Rounding by the magic-number addition: for |y| < 2^22, y + 1.5 * 2^23 rounds y to the
    // nearest integer (ties to even, as lrintf) in the low mantissa bits. |y| <= limit here, so
    // this is exact and skips NearestInt's overflow fix-ups.
    const auto inverse = hn::Set(df, s.inverse);
    const auto magic = hn::Set(df, 12582912.0f);
    const auto magic_bits = hn::Set(di, 0x4B400000);
    int16_t* out = q16 + r * d;
    for (int64_t c = 0; c < whole; c += lanes) {
      const auto y = hn::Mul(hn::Mul(hn::LoadU(df, x + c), hn::LoadU(df, scale + c)), inverse);
      const auto rounded = hn::Sub(hn::BitCast(di, hn::Add(y, magic)), magic_bits);
      hn::StoreU(hn::DemoteTo(d16, rounded), d16, out + c);
    }
    for (int64_t c = whole; c < d; ++c) out[c] = static_cast<int16_t>(std::lrintf(x[c] * scale[c] * s.inverse));
  }
}

#if HWY_TARGET != HWY_SCALAR
// The integer sums of one row for NQ queries (each an i32 vector whose lanes add up to the
// sum): the row's bytes are widened to 16-bit codes one chunk at a time and each plane's codes
// feed NQ pairwise multiply-adds. kChunks > 0 is the number of chunks in a plane known at
// compile time (the loop unrolls and the zero start folds away); 0 reads it from plane_bytes.
template <int B, int NQ, int kChunks, class D32>
HWY_INLINE void row_sums(D32 d32, const uint8_t* row, int64_t plane_bytes, const int16_t* q16, int64_t d,
                         hn::Vec<D32>* sum) {
  const hn::Repartition<int16_t, D32> d16;
  const hn::RebindToUnsigned<decltype(d16)> du16;
  const hn::Rebind<uint8_t, decltype(du16)> d8;
  constexpr int kPlanes = 8 / B;
  const int64_t chunk = static_cast<int64_t>(hn::Lanes(du16));
  const auto mask = hn::Set(du16, static_cast<uint16_t>((1 << B) - 1));
  hn::Vec<D32> odd[NQ];
  for (int r = 0; r < NQ; ++r) sum[r] = odd[r] = hn::Zero(d32);
  const int64_t n_chunks = kChunks > 0 ? kChunks : plane_bytes / chunk;
#pragma GCC unroll 8
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    const int64_t p0 = ci * chunk;
    const auto wide = hn::PromoteTo(du16, hn::LoadU(d8, row + p0));
    for (int k = 0; k < kPlanes; ++k) {
      // The top field of a byte needs no mask after its shift; the bottom one no shift.
      const auto field = k == 0 ? wide : hn::ShiftRightSame(wide, k * B);
      const auto codes = hn::BitCast(d16, k == kPlanes - 1 ? field : hn::And(field, mask));
      for (int r = 0; r < NQ; ++r) {
        const auto q = hn::LoadU(d16, q16 + r * d + k * plane_bytes + p0);
        sum[r] = hn::ReorderWidenMulAccumulate(d32, codes, q, sum[r], odd[r]);
      }
    }
  }
  for (int r = 0; r < NQ; ++r) sum[r] = hn::RearrangeToOddPlusEven(sum[r], odd[r]);
}

#if !HWY_HAVE_SCALABLE
// score_block for planes of one chunk on 16-lane targets: rows in fours, each four as two pairs
// of rows sharing 512-bit vectors (the queries' codes-side operands loaded once per call), then
// the last rows one by one with the 8-lane sums.
template <int B, int NQ>
void score_row_pairs(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const int16_t* q16,
                     int64_t d, const float* step, const float* bias, float* scores, int64_t ld) {
  using DW = hn::CappedTag<int32_t, 16>;
  const DW dw;
  const hn::CappedTag<int32_t, 8> d32;
  using V32 = hn::Vec<decltype(d32)>;
  const hn::Repartition<int16_t, DW> dw16;
  const hn::RebindToUnsigned<decltype(dw16)> du16;
  const hn::Half<decltype(dw16)> dh16;
  const hn::Rebind<uint8_t, decltype(du16)> d8;
  const hn::Half<decltype(d8)> dh8;
  constexpr int kPlanes = 8 / B;
  const auto mask = hn::Set(du16, static_cast<uint16_t>((1 << B) - 1));
  hn::Vec<decltype(dw16)> q[NQ][kPlanes];
  for (int r = 0; r < NQ; ++r) {
    for (int k = 0; k < kPlanes; ++k) {
      const auto h = hn::LoadU(dh16, q16 + r * d + k * plane_bytes);
      q[r][k] = hn::Combine(dw16, h, h);
    }
  }
  const auto pair_sums = [&](int64_t j, V32 * lo, V32 * hi) HWY_ATTR __attribute__((always_inline)) {
    const auto wide = hn::PromoteTo(
        du16, hn::Combine(d8, hn::LoadU(dh8, bytes + (j + 1) * row_stride), hn::LoadU(dh8, bytes + j * row_stride)));
    hn::Vec<DW> sum[NQ], odd[NQ];
    for (int r = 0; r < NQ; ++r) sum[r] = odd[r] = hn::Zero(dw);
    for (int k = 0; k < kPlanes; ++k) {
      const auto field = k == 0 ? wide : hn::ShiftRightSame(wide, k * B);
      const auto codes = hn::BitCast(dw16, k == kPlanes - 1 ? field : hn::And(field, mask));
      for (int r = 0; r < NQ; ++r) sum[r] = hn::ReorderWidenMulAccumulate(dw, codes, q[r][k], sum[r], odd[r]);
    }
    for (int r = 0; r < NQ; ++r) {
      const auto total = hn::RearrangeToOddPlusEven(sum[r], odd[r]);
      lo[r] = hn::LowerHalf(d32, total);
      hi[r] = hn::UpperHalf(d32, total);
    }
  };
  const auto bias_of = [&](int r) { return bias != nullptr ? bias[r] : 0.0f; };
  int64_t j = 0;
  for (; j + 4 <= n_rows; j += 4) {
    V32 s0[NQ], s1[NQ], s2[NQ], s3[NQ];
    pair_sums(j, s0, s1);
    keep_in_registers<NQ>(s0);
    keep_in_registers<NQ>(s1);
    pair_sums(j + 2, s2, s3);
    for (int r = 0; r < NQ; ++r) finish_4(d32, s0[r], s1[r], s2[r], s3[r], step[r], bias_of(r), scores + r * ld + j);
  }
  for (; j < n_rows; ++j) {
    V32 s[NQ];
    row_sums<B, NQ, 1>(d32, bytes + j * row_stride, plane_bytes, q16, d, s);
    for (int r = 0; r < NQ; ++r) {
      scores[r * ld + j] = step[r] * static_cast<float>(hn::GetLane(hn::SumOfLanes(d32, s[r]))) + bias_of(r);
    }
  }
}
#endif

// NQ queries against rows [0, n_rows).
template <int B, int NQ, int kChunks>
void score_block(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const int16_t* q16,
                 int64_t d, const float* step, const float* bias, float* scores, int64_t ld) {
  const hn::CappedTag<int32_t, 8> d32;
#if !HWY_HAVE_SCALABLE
  // AVX-512, planes of whole 32-byte chunks: each row's sums in 16-lane vectors (32 codes per
  // multiply-add instead of 16), folded to 8 lanes by one add of the halves. Integer sums are
  // exact in any grouping, so the scores are the 8-lane kernel's.
  using DW = hn::CappedTag<int32_t, 16>;
  if constexpr (hn::MaxLanes(DW()) == 16 && (kChunks == 0 || kChunks % 2 == 0)) {
    if (plane_bytes % 32 == 0) {
      const DW dw;
      const auto wide_sums = [&](int64_t j, hn::Vec<decltype(d32)> * s) HWY_ATTR __attribute__((always_inline)) {
        hn::Vec<DW> w[NQ];
        row_sums<B, NQ, kChunks / 2>(dw, bytes + j * row_stride, plane_bytes, q16, d, w);
        for (int r = 0; r < NQ; ++r) s[r] = hn::Add(hn::LowerHalf(d32, w[r]), hn::UpperHalf(d32, w[r]));
      };
      score_rows_in_fours<NQ>(d32, n_rows, wide_sums, step, bias, scores, ld);
      return;
    }
  }
  // AVX-512, planes of one 16-byte chunk (2-bit keys of 64 channels: the 8-lane loop ran at half
  // the machine's width): two rows per 16-lane vector, row j's codes in the lower half and row
  // j + 1's in the upper, each query's chunk in both halves. Integer sums are exact in any
  // grouping, so the scores are the 8-lane kernel's.
  if constexpr (hn::MaxLanes(DW()) == 16 && kChunks == 1) {
    if (n_rows >= 4) {
      score_row_pairs<B, NQ>(bytes, row_stride, n_rows, plane_bytes, q16, d, step, bias, scores, ld);
      return;
    }
  }
#endif
  const auto sums = [&](int64_t j, hn::Vec<decltype(d32)> * s) HWY_ATTR __attribute__((always_inline)) {
    row_sums<B, NQ, kChunks>(d32, bytes + j * row_stride, plane_bytes, q16, d, s);
  };
  score_rows_in_fours<NQ>(d32, n_rows, sums, step, bias, scores, ld);
}

template <int B, int kChunks>
void score_queries(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const int16_t* q16,
                   const float* step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const int64_t d = 8 / B * plane_bytes;
  int64_t r = 0;
  // Blocks of three queries (a GQA group of SmolLM2-sized models; 3 x 4 row accumulators stay
  // in registers), then the rest one by one.
  for (; r + 3 <= n_q; r += 3) {
    score_block<B, 3, kChunks>(bytes, row_stride, n_rows, plane_bytes, q16 + r * d, d, step + r, bias + r,
                               scores + r * ld, ld);
  }
  for (; r < n_q; ++r) {
    score_block<B, 1, kChunks>(bytes, row_stride, n_rows, plane_bytes, q16 + r * d, d, step + r, bias + r,
                               scores + r * ld, ld);
  }
}

template <int B>
void score_bits(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const int16_t* q16,
                const float* step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const hn::CappedTag<int32_t, 8> d32;
  const hn::Repartition<uint16_t, decltype(d32)> du16;  // score_block's chunk
  // Head sizes 64 and 128 make planes of 1, 2, 4 or 8 chunks: unrolled; anything else loops.
  switch (plane_bytes / static_cast<int64_t>(hn::Lanes(du16))) {
    case 1:
      score_queries<B, 1>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
    case 2:
      score_queries<B, 2>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
    case 4:
      score_queries<B, 4>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
    case 8:
      score_queries<B, 8>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
    default:
      score_queries<B, 0>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
  }
}

void ScoreCodesImpl(const PlaneCodeRows& rows, const IntegerQueries& queries, float* scores, int64_t ld) {
  const auto [bytes, row_stride, n_rows, plane_bytes, bits] = rows;
  const auto [q16, step, bias, n_q] = queries;
  switch (bits) {
    case 2:
      score_bits<2>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
    case 4:
      score_bits<4>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
    default:
      score_bits<8>(bytes, row_stride, n_rows, plane_bytes, q16, step, bias, n_q, scores, ld);
      break;
  }
}
#else
// One-lane vectors have no 16-bit pairs to multiply-add: the scalar target is the reference.
void ScoreCodesImpl(const PlaneCodeRows& rows, const IntegerQueries& queries, float* scores, int64_t ld) {
  scalar::score_codes_i16(rows, queries, scores, ld);
}
#endif

int64_t ChunkBytesImpl() {
#if HWY_TARGET == HWY_SCALAR
  return 1;
#else
  const hn::CappedTag<int32_t, 8> d32;
  const hn::Repartition<uint16_t, decltype(d32)> du16;
  return static_cast<int64_t>(hn::Lanes(du16));
#endif
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(FoldQueriesImpl);
HWY_EXPORT(ScoreCodesImpl);
HWY_EXPORT(ChunkBytesImpl);

int32_t integer_query_limit(int bits, int64_t dim) {
  const int64_t max_code = (int64_t{1} << bits) - 1;
  const int64_t bound = std::numeric_limits<int32_t>::max() / std::max<int64_t>(1, max_code * dim);
  return static_cast<int32_t>(std::min<int64_t>(32767, bound));
}

void fold_queries_i16(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, int32_t limit,
                      int16_t* q16, float* step, float* bias) {
  HWY_DYNAMIC_DISPATCH(FoldQueriesImpl)(q, n_q, d, scale, min, limit, q16, step, bias);
}

int64_t integer_chunk_bytes() {
  static const int64_t chunk = HWY_DYNAMIC_DISPATCH(ChunkBytesImpl)();
  return chunk;
}

bool can_score_codes_i16(int bits, int64_t plane_bytes) {
  // Each chunk of a plane is widened whole, so a plane must be whole chunks.
  const int64_t chunk = integer_chunk_bytes();
  return (bits == 2 || bits == 4 || bits == 8) && plane_bytes > 0 && plane_bytes % chunk == 0;
}

void score_codes_i16(const PlaneCodeRows& rows, const IntegerQueries& queries, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreCodesImpl)(rows, queries, scores, ld);
}

namespace scalar {

void fold_queries_i16(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, int32_t limit,
                      int16_t* q16, float* step, float* bias) {
  for (int64_t r = 0; r < n_q; ++r) {
    const float* x = q + r * d;
    float max_abs = 0.0f;
    bool finite = true;
    double b = 0.0;  // a plain sum: the SIMD one may differ by reassociation only
    for (int64_t c = 0; c < d; ++c) {
      const float folded = x[c] * scale[c];
      finite = finite && std::isfinite(folded);
      max_abs = std::max(max_abs, std::fabs(folded));
      b += static_cast<double>(x[c]) * min[c];
    }
    const QueryStep s = query_step(finite ? max_abs : std::numeric_limits<float>::quiet_NaN(), limit);
    step[r] = s.step;
    bias[r] = static_cast<float>(b);
    for (int64_t c = 0; c < d; ++c) q16[r * d + c] = static_cast<int16_t>(std::lrintf(x[c] * scale[c] * s.inverse));
  }
}

void score_codes_i16(const PlaneCodeRows& rows, const IntegerQueries& queries, float* scores, int64_t ld) {
  const auto [bytes, row_stride, n_rows, plane_bytes, bits] = rows;
  const auto [q16, step, bias, n_q] = queries;
  const int planes = 8 / bits;
  const int64_t d = planes * plane_bytes;
  const int mask = (1 << bits) - 1;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* row = bytes + j * row_stride;
      int32_t total = 0;
      for (int k = 0; k < planes; ++k) {
        for (int64_t p = 0; p < plane_bytes; ++p) {
          total += static_cast<int32_t>(q16[r * d + k * plane_bytes + p]) * ((row[p] >> (k * bits)) & mask);
        }
      }
      scores[r * ld + j] = step[r] * static_cast<float>(total) + bias[r];
    }
  }
}

}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
