// Highway kernels for float_key_scores.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/float_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/float_key_scores.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

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

template <int B, int NQ, int kChunks>
void score_block(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, const float* folded,
                 int64_t d, const float* bias, float* scores, int64_t ld) {
  const hn::CappedTag<float, 8> df;
  using V = hn::Vec<decltype(df)>;
  const auto sums = [&](int64_t j, V * s) HWY_ATTR __attribute__((always_inline)) {
    float_row_sums<B, NQ, kChunks>(df, bytes + j * row_stride, plane_bytes, folded, d, s);
  };
  int64_t j = 0;
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
void score_codes_f32(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                     const float* folded, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const int planes = 8 / bits;
  const int64_t d = planes * plane_bytes;
  const int mask = (1 << bits) - 1;
  for (int64_t r = 0; r < n_q; ++r) {
    const float* q = folded + r * d;
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* row = bytes + j * row_stride;
      float lanes[8] = {};
      for (int64_t p0 = 0; p0 < plane_bytes; p0 += 8) {
        for (int k = 0; k < planes; ++k) {
          for (int64_t l = 0; l < 8; ++l) {
            const float code = static_cast<float>((row[p0 + l] >> (k * bits)) & mask);
            lanes[l] = std::fma(code, q[k * plane_bytes + p0 + l], lanes[l]);
          }
        }
      }
      scores[r * ld + j] = detail::add_key_lanes(lanes) + bias[r];
    }
  }
}
}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
