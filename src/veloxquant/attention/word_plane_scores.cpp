// Highway kernel for word_plane_scores.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/word_plane_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/word_plane_scores.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

#include <algorithm>
#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 8>;

// The kernel needs 8 lanes of 32 bits (sums_of_4): 256-bit targets and wider, where CappedTag
// gives exactly 8; narrower targets run the scalar reference.
#if HWY_TARGET != HWY_SCALAR && HWY_MAX_BYTES >= 32
#define VELOXQUANT_WORD_PLANES_SIMD 1
// How a B-bit code becomes the value it stands for: its level from 2^B in-register lanes, its
// level by a gather, or the code itself.
enum class Lookup { kRegister, kGather, kNone };

// The 8-lane sums of one row for NQ folded queries (lanes fused multiply-adds in (v, p) order,
// as the scalar reference).
template <int B, Lookup L, int NQ>
HWY_INLINE void row_sums(DF df, const uint32_t* row, int64_t vectors, hn::Mask<hn::RebindToUnsigned<DF>> last_mask,
                         hn::Vec<DF> table, const float* levels, const float* folded, int64_t dim, hn::Vec<DF>* acc) {
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  constexpr int kPer = 32 / B;
  const auto mask = hn::Set(du, (1u << B) - 1u);
  for (int r = 0; r < NQ; ++r) acc[r] = hn::Zero(df);
  for (int64_t v = 0; v < vectors; ++v) {
    const auto words = v + 1 < vectors ? hn::LoadU(du, row + 8 * v) : hn::MaskedLoad(last_mask, du, row + 8 * v);
    const float* q = folded + v * kPer * NQ * 8;
#pragma GCC unroll 32
    for (int p = 0; p < kPer; ++p) {
      // Logical shifts: the top field of a full word needs no mask. Nor does a level lookup on x86,
      // whose lane permutes read only an index's low 3 bits (the table repeats every 2^B lanes).
      constexpr bool kUnmasked = L == Lookup::kRegister && HWY_ARCH_X86;
      const auto field = p == 0 ? words : hn::ShiftRightSame(words, B * p);
      const auto code = hn::BitCast(di, (kUnmasked || B * (p + 1) == 32) ? field : hn::And(field, mask));
      hn::Vec<DF> value;
      if constexpr (L == Lookup::kRegister) {
        value = hn::TableLookupLanes(table, hn::IndicesFromVec(df, code));
      } else if constexpr (L == Lookup::kGather) {
        value = hn::GatherIndex(df, levels, code);
      } else {
        value = hn::ConvertTo(df, code);
      }
      for (int r = 0; r < NQ; ++r) acc[r] = hn::MulAdd(value, hn::Load(df, q + (p * NQ + r) * 8), acc[r]);
    }
  }
}

// Folded queries are repacked plane-major with the NQ queries side by side ([v][p][r][8 lanes]):
// every load of a row's pass is then a constant offset from one pointer (with [r][dim] the
// compiler ran out of registers for the NQ x planes addresses and reloaded them from the stack).
constexpr int64_t kMaxPacked = 3 * 1024;

template <int B, Lookup L, int NQ>
void score_block(const uint32_t* first_row, int64_t row_stride, int64_t n_rows, int64_t vectors, int64_t words,
                 const float* levels, const float* folded_rows, int64_t dim, const float* bias, float* scores,
                 int64_t ld) {
  const DF df;
  HWY_ALIGN float folded[kMaxPacked];
  for (int64_t e = 0; e < dim; e += 8) {
    for (int r = 0; r < NQ; ++r) hn::Store(hn::LoadU(df, folded_rows + r * dim + e), df, folded + (e * NQ + r * 8));
  }
  const hn::RebindToUnsigned<DF> du;
  const hn::Half<DF> dh;
  using V = hn::Vec<DF>;
  const auto last_mask = hn::FirstN(du, static_cast<std::size_t>(words - 8 * (vectors - 1)));
  HWY_ALIGN float lanes[8];
  for (int k = 0; k < 8; ++k) lanes[k] = L == Lookup::kRegister ? levels[k % (1 << B)] : 0.0f;
  const V table = hn::Load(df, lanes);
  const auto row = [&](int64_t j) { return first_row + j * row_stride; };
  int64_t j = 0;
#if !HWY_HAVE_SCALABLE
  // AVX-512: four rows in two 16-lane vectors, x = rows (j, j + 2) and y = (j + 1, j + 3), one
  // row per 8-lane half running row_sums' FMA chain; each folded chunk stored twice in a row
  // (`doubled`) feeds both halves from one load: half the lookups and FMAs of four 8-lane rows.
  // sums_of_pair(x, y) holds the pairs (j, j + 1) and (j + 2, j + 3) in its halves, and
  // sums_of_pairs of them is sums_of_4 of the four rows: bit-identical scores.
  using DW = hn::CappedTag<float, 16>;
  if constexpr (hn::MaxLanes(DW()) == 16) {
    if (n_rows >= 4) {
      const DW dw;
      const hn::RebindToSigned<DW> diw;
      const hn::RebindToUnsigned<DW> duw;
      constexpr int kPer = 32 / B;
      HWY_ALIGN float doubled[2 * kMaxPacked];
      for (int64_t e = 0; e < NQ * dim; e += 8) {
        const auto chunk = hn::Load(df, folded + e);
        hn::Store(chunk, df, doubled + 2 * e);
        hn::Store(chunk, df, doubled + 2 * e + 8);
      }
      HWY_ALIGN float lanes16[16];
      for (int k = 0; k < 16; ++k) lanes16[k] = L == Lookup::kRegister ? levels[k % (1 << B)] : 0.0f;
      const auto table16 = hn::Load(dw, lanes16);
      const auto mask = hn::Set(duw, (1u << B) - 1u);
      const auto value_of = [&](hn::Vec<decltype(duw)> field, bool top) HWY_ATTR __attribute__((always_inline)) {
        constexpr bool kUnmasked = L == Lookup::kRegister && HWY_ARCH_X86;
        const auto code = hn::BitCast(diw, (kUnmasked || top) ? field : hn::And(field, mask));
        if constexpr (L == Lookup::kRegister) {
          return hn::TableLookupLanes(table16, hn::IndicesFromVec(dw, code));
        } else if constexpr (L == Lookup::kGather) {
          return hn::GatherIndex(dw, levels, code);
        } else {
          return hn::ConvertTo(dw, code);
        }
      };
      for (; j + 4 <= n_rows; j += 4) {
        hn::Vec<DW> x[NQ], y[NQ];
        for (int r = 0; r < NQ; ++r) x[r] = y[r] = hn::Zero(dw);
        for (int64_t v = 0; v < vectors; ++v) {
          const auto load = [&](int64_t jj) HWY_ATTR __attribute__((always_inline)) {
            return v + 1 < vectors ? hn::LoadU(du, row(jj) + 8 * v) : hn::MaskedLoad(last_mask, du, row(jj) + 8 * v);
          };
          const auto wx = hn::Combine(duw, load(j + 2), load(j));
          const auto wy = hn::Combine(duw, load(j + 3), load(j + 1));
          const float* q = doubled + 2 * v * kPer * NQ * 8;
#pragma GCC unroll 32
          for (int p = 0; p < kPer; ++p) {
            const bool top = B * (p + 1) == 32;
            const auto vx = value_of(p == 0 ? wx : hn::ShiftRightSame(wx, B * p), top);
            const auto vy = value_of(p == 0 ? wy : hn::ShiftRightSame(wy, B * p), top);
            for (int r = 0; r < NQ; ++r) {
              const auto qv = hn::Load(dw, q + (p * NQ + r) * 16);
              x[r] = hn::MulAdd(vx, qv, x[r]);
              y[r] = hn::MulAdd(vy, qv, y[r]);
            }
          }
        }
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
    V s0[NQ], s1[NQ], s2[NQ], s3[NQ];
    row_sums<B, L, NQ>(df, row(j), vectors, last_mask, table, levels, folded, dim, s0);
    row_sums<B, L, NQ>(df, row(j + 1), vectors, last_mask, table, levels, folded, dim, s1);
    row_sums<B, L, NQ>(df, row(j + 2), vectors, last_mask, table, levels, folded, dim, s2);
    row_sums<B, L, NQ>(df, row(j + 3), vectors, last_mask, table, levels, folded, dim, s3);
    for (int r = 0; r < NQ; ++r) {
      hn::StoreU(hn::Add(sums_of_4(df, s0[r], s1[r], s2[r], s3[r]), hn::Set(dh, bias[r])), dh, scores + r * ld + j);
    }
  }
  for (; j < n_rows; ++j) {
    V s[NQ];
    row_sums<B, L, NQ>(df, row(j), vectors, last_mask, table, levels, folded, dim, s);
    const V zero = hn::Zero(df);
    for (int r = 0; r < NQ; ++r) {
      scores[r * ld + j] = hn::GetLane(sums_of_4(df, s[r], zero, zero, zero)) + bias[r];
    }
  }
}

template <int B, Lookup L>
void score_queries(const uint32_t* first_row, int64_t row_stride, int64_t n_rows, int64_t vectors, int64_t words,
                   const float* levels, const float* folded, int64_t dim, int64_t n_q, const float* bias, float* scores,
                   int64_t ld) {
  int64_t r = 0;
  // Blocks of three queries (a GQA group of SmolLM2-sized models), then the rest one by one.
  for (; r + 3 <= n_q; r += 3) {
    score_block<B, L, 3>(first_row, row_stride, n_rows, vectors, words, levels, folded + r * dim, dim, bias + r,
                         scores + r * ld, ld);
  }
  for (; r < n_q; ++r) {
    score_block<B, L, 1>(first_row, row_stride, n_rows, vectors, words, levels, folded + r * dim, dim, bias + r,
                         scores + r * ld, ld);
  }
}

template <int B>
void score_bits(const uint32_t* first_row, int64_t row_stride, int64_t n_rows, int64_t vectors, int64_t words,
                const float* levels, const float* folded, int64_t dim, int64_t n_q, const float* bias, float* scores,
                int64_t ld) {
  if (levels == nullptr) {
    score_queries<B, Lookup::kNone>(first_row, row_stride, n_rows, vectors, words, levels, folded, dim, n_q, bias,
                                    scores, ld);
  } else if constexpr (B <= 3) {
    score_queries<B, Lookup::kRegister>(first_row, row_stride, n_rows, vectors, words, levels, folded, dim, n_q, bias,
                                        scores, ld);
  } else {
    score_queries<B, Lookup::kGather>(first_row, row_stride, n_rows, vectors, words, levels, folded, dim, n_q, bias,
                                      scores, ld);
  }
}
#endif  // 256-bit targets

void ScoreWordPlanesImpl(const uint32_t* first_row, int64_t row_stride, int64_t n_rows, const WordPlanes& planes,
                         const float* levels, const float* folded, int64_t n_q, const float* bias, float* scores,
                         int64_t ld) {
#ifdef VELOXQUANT_WORD_PLANES_SIMD
  if (planes.dim() * 3 <= kMaxPacked) {
    const int64_t dim = planes.dim();
    const auto args = [&](auto bits_tag) {
      score_bits<decltype(bits_tag)::value>(first_row, row_stride, n_rows, planes.vectors, planes.words, levels, folded,
                                            dim, n_q, bias, scores, ld);
    };
    switch (planes.bits) {
      case 1:
        return args(std::integral_constant<int, 1>());
      case 2:
        return args(std::integral_constant<int, 2>());
      case 3:
        return args(std::integral_constant<int, 3>());
      case 4:
        return args(std::integral_constant<int, 4>());
      case 5:
        return args(std::integral_constant<int, 5>());
      case 6:
        return args(std::integral_constant<int, 6>());
      case 7:
        return args(std::integral_constant<int, 7>());
      default:
        return args(std::integral_constant<int, 8>());
    }
  }
#endif
  // Narrower vectors (and the scalar target): the reference, which sums in the same order.
  scalar::score_word_planes(first_row, row_stride, n_rows, planes, levels, folded, n_q, bias, scores, ld);
}
#undef VELOXQUANT_WORD_PLANES_SIMD

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(ScoreWordPlanesImpl);

WordPlanes word_planes(int bits, int64_t codes) {
  WordPlanes planes;
  planes.bits = bits;
  planes.per = 32 / bits;
  planes.codes = codes;
  planes.words = (codes + planes.per - 1) / planes.per;
  planes.vectors = (planes.words + 7) / 8;
  return planes;
}

void to_word_plane_order(const WordPlanes& planes, const float* x, float* out) {
  for (int64_t e = 0; e < planes.dim(); ++e) {
    const int64_t i = planes.natural(e);
    out[e] = i < 0 ? 0.0f : x[i];
  }
}

void score_word_planes(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, const WordPlanes& planes,
                       const float* levels, const float* folded, int64_t n_q, const float* bias, float* scores,
                       int64_t ld) {
  if (n_rows <= 0 || n_q <= 0) return;
  HWY_DYNAMIC_DISPATCH(ScoreWordPlanesImpl)
  (first_row, row_stride_words, n_rows, planes, levels, folded, n_q, bias, scores, ld);
}

namespace scalar {
namespace {
// One row's 8 lane sums against folded query q (lane l: word v * 8 + l of each vector v, its
// fields p ascending).
void row_word_lanes(const uint32_t* row, const WordPlanes& planes, const float* levels, const float* q, float lane[8]) {
  const uint32_t mask = planes.bits == 32 ? ~0u : (1u << planes.bits) - 1u;
  for (int64_t v = 0; v < planes.vectors; ++v) {
    for (int64_t p = 0; p < planes.per; ++p) {
      for (int l = 0; l < 8; ++l) {
        const int64_t word = v * 8 + l;
        // Lanes past the row's words read as zero (the SIMD kernel's masked load).
        const uint32_t w = word < planes.words ? row[word] : 0u;
        const uint32_t c = (w >> (planes.bits * p)) & mask;
        const float value = levels != nullptr ? levels[c] : static_cast<float>(c);
        lane[l] = std::fma(q[(v * planes.per + p) * 8 + l], value, lane[l]);
      }
    }
  }
}
}  // namespace

void score_word_planes(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, const WordPlanes& planes,
                       const float* levels, const float* folded, int64_t n_q, const float* bias, float* scores,
                       int64_t ld) {
  const int64_t dim = planes.dim();
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      float lane[8] = {};
      row_word_lanes(first_row + j * row_stride_words, planes, levels, folded + r * dim, lane);
      const float total = ((lane[0] + lane[2]) + (lane[1] + lane[3])) + ((lane[4] + lane[6]) + (lane[5] + lane[7]));
      scores[r * ld + j] = total + bias[r];
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
