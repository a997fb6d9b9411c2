// Highway kernels for float_key_scores.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/float_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/float_key_scores.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

#include <algorithm>
#include <cmath>

#ifndef VELOXQUANT_FLOAT_KEY_SCORES_SHARED
#define VELOXQUANT_FLOAT_KEY_SCORES_SHARED
namespace veloxquant::attention::kernels::detail {
// The eight lanes of a row's sum in the order sums_of_4 (integer_row_sums-inl.h) adds them.
inline float add_key_lanes(const float* l) { return ((l[0] + l[2]) + (l[1] + l[3])) + ((l[4] + l[6]) + (l[5] + l[7])); }
}  // namespace veloxquant::attention::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR && HWY_MAX_BYTES >= 32
// One row's lane sums for NQ queries: each 8-byte chunk widened to 32-bit lanes once, each of its
// 8/B fields masked (or shifted), converted to f32 and fed to NQ FMAs against the folded queries
// (read from memory: 3 queries x 64 floats do not fit the registers).
template <int B, int NQ, int kChunks, class DF>
HWY_INLINE void float_row_sums(DF df, const uint8_t* row, int64_t plane_bytes, const float* folded, int64_t d,
                               hn::Vec<DF>* sum) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  constexpr int kPlanes = 8 / B;
  const auto mask = hn::Set(di, (1 << B) - 1);
  for (int r = 0; r < NQ; ++r) sum[r] = hn::Zero(df);
  // With the plane size known at compile time every query offset is a constant displacement from
  // one base register (a runtime d cost ~40 address moves per row).
  if constexpr (kChunks > 0) {
    plane_bytes = kChunks * 8;
    d = kPlanes * kChunks * 8;
  }
  const int64_t n_chunks = kChunks > 0 ? kChunks : plane_bytes / 8;
#pragma GCC unroll 8
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    const int64_t p0 = ci * 8;
    const auto wide = hn::PromoteTo(di, hn::LoadU(d8, row + p0));
    for (int k = 0; k < kPlanes; ++k) {
      // The top field of a byte needs no mask after its shift; the bottom one no shift.
      const auto field = k == 0 ? wide : hn::ShiftRightSame(wide, k * B);
      const auto codes = hn::ConvertTo(df, k == kPlanes - 1 ? field : hn::And(field, mask));
      for (int r = 0; r < NQ; ++r)
        sum[r] = hn::MulAdd(codes, hn::LoadU(df, folded + r * d + k * plane_bytes + p0), sum[r]);
    }
  }
}

#if !HWY_HAVE_SCALABLE
// Most floats of NQ doubled queries the 16-lane pass keeps on the stack (NQ <= 3, d <= 256).
constexpr int64_t kMaxDoubled = 3 * 2 * 256;

// Four rows' lane sums for NQ queries in two 16-lane vectors: x holds rows j (lanes 0-7) and
// j + 2 (lanes 8-15), y rows j + 1 and j + 3. Each half runs the 8-lane kernel's FMA chain for
// its row; the query chunks come from `doubled` (each 8-float chunk of the folded query stored
// twice in a row), so one load feeds both halves. Half the FMAs of four 8-lane rows.
template <int B, int NQ, int kChunks, class DW>
HWY_INLINE void float_four_row_sums(DW dw, const uint8_t* row, int64_t row_stride, int64_t plane_bytes,
                                    const float* doubled, int64_t d, hn::Vec<DW>* x, hn::Vec<DW>* y) {
  const hn::RebindToSigned<DW> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const hn::Half<decltype(d8)> d8h;
  constexpr int kPlanes = 8 / B;
  const auto mask = hn::Set(di, (1 << B) - 1);
  for (int r = 0; r < NQ; ++r) x[r] = y[r] = hn::Zero(dw);
  if constexpr (kChunks > 0) {
    plane_bytes = kChunks * 8;
    d = kPlanes * kChunks * 8;
  }
  const int64_t n_chunks = kChunks > 0 ? kChunks : plane_bytes / 8;
  const uint8_t* r0 = row;
  const uint8_t* r1 = row + row_stride;
  const uint8_t* r2 = row + 2 * row_stride;
  const uint8_t* r3 = row + 3 * row_stride;
#pragma GCC unroll 8
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    const int64_t p0 = ci * 8;
    const auto wx = hn::PromoteTo(di, hn::Combine(d8, hn::LoadU(d8h, r2 + p0), hn::LoadU(d8h, r0 + p0)));
    const auto wy = hn::PromoteTo(di, hn::Combine(d8, hn::LoadU(d8h, r3 + p0), hn::LoadU(d8h, r1 + p0)));
    for (int k = 0; k < kPlanes; ++k) {
      const auto fx = k == 0 ? wx : hn::ShiftRightSame(wx, k * B);
      const auto fy = k == 0 ? wy : hn::ShiftRightSame(wy, k * B);
      const auto cx = hn::ConvertTo(dw, k == kPlanes - 1 ? fx : hn::And(fx, mask));
      const auto cy = hn::ConvertTo(dw, k == kPlanes - 1 ? fy : hn::And(fy, mask));
      for (int r = 0; r < NQ; ++r) {
        const auto q = hn::LoadU(dw, doubled + 2 * (r * d + k * plane_bytes + p0));
        x[r] = hn::MulAdd(cx, q, x[r]);
        y[r] = hn::MulAdd(cy, q, y[r]);
      }
    }
  }
}
#endif

template <int B, int NQ, int kChunks>
void score_block(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const float* folded,
                 int64_t d, const float* bias, float* scores, int64_t ld) {
  const hn::CappedTag<float, 8> df;
  using V = hn::Vec<decltype(df)>;
  const auto sums = [&](int64_t j, V * s) HWY_ATTR __attribute__((always_inline)) {
    float_row_sums<B, NQ, kChunks>(df, bytes + j * row_stride, plane_bytes, folded, d, s);
  };
  int64_t j = 0;
#if !HWY_HAVE_SCALABLE
  // AVX-512: four rows in two 16-lane vectors (float_four_row_sums), reduced by the same
  // shuffles and adds as the 8-lane loop below: the low halves of sums_of_pair(x, y) are the
  // pair (j, j + 1), the high halves (j + 2, j + 3), so the scores are bit-identical.
  using DW = hn::CappedTag<float, 16>;
  if constexpr (hn::MaxLanes(DW()) == 16) {
    if (NQ * 2 * d <= kMaxDoubled && n_rows >= 4) {
      const DW dw;
      HWY_ALIGN float doubled[kMaxDoubled];
      for (int64_t e = 0; e < NQ * d; e += 8) {
        std::copy_n(folded + e, 8, doubled + 2 * e);
        std::copy_n(folded + e, 8, doubled + 2 * e + 8);
      }
      const hn::Half<decltype(df)> dh;
      for (; j + 4 <= n_rows; j += 4) {
        hn::Vec<DW> x[NQ], y[NQ];
        float_four_row_sums<B, NQ, kChunks>(dw, bytes + j * row_stride, row_stride, plane_bytes, doubled, d, x, y);
        for (int r = 0; r < NQ; ++r) {
          const auto pairs = sums_of_pair(dw, x[r], y[r]);
          const auto four = sums_of_pairs(df, hn::LowerHalf(df, pairs), hn::UpperHalf(df, pairs));
          hn::StoreU(hn::Add(four, hn::Set(dh, bias[r])), dh, scores + r * ld + j);
        }
      }
    }
  }
#endif
  for (; j + 4 <= n_rows; j += 4) {
    // Each pair of rows folded as soon as both are done (sums_of_4's first step, the same sums).
    V s0[NQ], s1[NQ], ab[NQ];
    sums(j, s0);
    keep_in_registers<NQ>(s0);
    sums(j + 1, s1);
    for (int r = 0; r < NQ; ++r) ab[r] = sums_of_pair(df, s0[r], s1[r]);
    keep_in_registers<NQ>(ab);
    sums(j + 2, s0);
    keep_in_registers<NQ>(s0);
    sums(j + 3, s1);
    const hn::Half<decltype(df)> dh;
    for (int r = 0; r < NQ; ++r) {
      const auto four = sums_of_pairs(df, ab[r], sums_of_pair(df, s0[r], s1[r]));
      hn::StoreU(hn::Add(four, hn::Set(dh, bias[r])), dh, scores + r * ld + j);
    }
  }
  HWY_ALIGN float lanes[8];
  for (; j < n_rows; ++j) {
    V s[NQ];
    sums(j, s);
    for (int r = 0; r < NQ; ++r) {
      hn::Store(s[r], df, lanes);
      scores[r * ld + j] = detail::add_key_lanes(lanes) + bias[r];
    }
  }
}

template <int B, int kChunks>
void score_queries(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const float* folded,
                   const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const int64_t d = 8 / B * plane_bytes;
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    score_block<B, 3, kChunks>(bytes, row_stride, n_rows, plane_bytes, folded + r * d, d, bias + r, scores + r * ld,
                               ld);
  }
  for (; r < n_q; ++r) {
    score_block<B, 1, kChunks>(bytes, row_stride, n_rows, plane_bytes, folded + r * d, d, bias + r, scores + r * ld,
                               ld);
  }
}

template <int B>
void score_bits(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const float* folded,
                const float* bias, int64_t n_q, float* scores, int64_t ld) {
  // Head sizes 64 and 128 make planes of 1, 2, 4, 8 or 16 chunks: unrolled; anything else loops.
  switch (plane_bytes / 8) {
    case 2:
      score_queries<B, 2>(bytes, row_stride, n_rows, plane_bytes, folded, bias, n_q, scores, ld);
      break;
    case 4:
      score_queries<B, 4>(bytes, row_stride, n_rows, plane_bytes, folded, bias, n_q, scores, ld);
      break;
    case 8:
      score_queries<B, 8>(bytes, row_stride, n_rows, plane_bytes, folded, bias, n_q, scores, ld);
      break;
    default:
      score_queries<B, 0>(bytes, row_stride, n_rows, plane_bytes, folded, bias, n_q, scores, ld);
      break;
  }
}

bool ScoreCodesF32Impl(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                       const float* folded, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const hn::CappedTag<float, 8> df;
  if (hn::Lanes(df) != 8) return false;  // the lane order is the 8-lane reference's
  switch (bits) {
    case 2:
      score_bits<2>(bytes, row_stride, n_rows, plane_bytes, folded, bias, n_q, scores, ld);
      break;
    case 4:
      score_bits<4>(bytes, row_stride, n_rows, plane_bytes, folded, bias, n_q, scores, ld);
      break;
    default:
      score_bits<8>(bytes, row_stride, n_rows, plane_bytes, folded, bias, n_q, scores, ld);
      break;
  }
  return true;
}
#else
// Narrower vectors than 8 lanes (and the scalar target) take the reference, whose lane order
// is the 8-lane kernel's.
bool ScoreCodesF32Impl(const uint8_t*, int64_t, int64_t, int64_t, int, const float*, const float*, int64_t, float*,
                       int64_t) {
  return false;
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(ScoreCodesF32Impl);

bool can_score_codes_f32(int bits, int64_t plane_bytes) {
  return (bits == 2 || bits == 4 || bits == 8) && plane_bytes > 0 && plane_bytes % 8 == 0;
}

void score_codes_f32(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                     const float* folded, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  if (!HWY_DYNAMIC_DISPATCH(ScoreCodesF32Impl)(bytes, row_stride, n_rows, plane_bytes, bits, folded, bias, n_q, scores,
                                               ld)) {
    scalar::score_codes_f32(bytes, row_stride, n_rows, plane_bytes, bits, folded, bias, n_q, scores, ld);
  }
}

namespace scalar {
namespace {
// One row's 8 lane sums against folded query q: lane l takes the codes at byte offsets p0 + l
// of every 8-byte chunk, plane after plane, one fma each (the SIMD kernels' order).
void row_key_lanes(const uint8_t* row, int64_t plane_bytes, int bits, const float* q, float lanes[8]) {
  const int planes = 8 / bits;
  const int mask = (1 << bits) - 1;
  for (int64_t p0 = 0; p0 < plane_bytes; p0 += 8) {
    for (int k = 0; k < planes; ++k) {
      for (int64_t l = 0; l < 8; ++l) {
        const float code = static_cast<float>((row[p0 + l] >> (k * bits)) & mask);
        lanes[l] = std::fma(code, q[k * plane_bytes + p0 + l], lanes[l]);
      }
    }
  }
}
}  // namespace

void score_codes_f32(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                     const float* folded, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const int64_t d = 8 / bits * plane_bytes;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      float lanes[8] = {};
      row_key_lanes(bytes + j * row_stride, plane_bytes, bits, folded + r * d, lanes);
      scores[r * ld + j] = detail::add_key_lanes(lanes) + bias[r];
    }
  }
}
}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
