// Highway kernels for affine_value_sums.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/affine_value_sums.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/affine_value_sums.h"

#include <algorithm>
#include <cmath>

#include "base/half.h"

#ifndef VELOXQUANT_AFFINE_VALUE_SUMS_SHARED
#define VELOXQUANT_AFFINE_VALUE_SUMS_SHARED
namespace veloxquant::attention::kernels::detail {

// The eight bias lanes added pairwise: (l + 4), then (l + 2), then (l + 1). Shared by the SIMD
// kernel and the scalar reference so that both sum in this order.
inline float add_lanes(const float* lane) {
  const float a0 = lane[0] + lane[4], a1 = lane[1] + lane[5], a2 = lane[2] + lane[6], a3 = lane[3] + lane[7];
  const float b0 = a0 + a2, b1 = a1 + a3;
  return b0 + b1;
}

constexpr int64_t kMaxWordChunks = 64;  // 512 codes

// Per 8-code chunk of a word-layout row: the first word it loads (base), and per lane the word
// (relative to base) and the bit offset of its code. Rows of fewer than 8 words are loaded whole
// (base 0, masked); longer ones load the 8 words from base, which stays inside the row.
struct WordChunks {
  int bits = 0;
  int64_t n = -1;
  int64_t row_words = 0;
  int32_t base[kMaxWordChunks];
  uint32_t word[kMaxWordChunks][8];
  uint32_t shift[kMaxWordChunks][8];
};

// Rebuilt only when the row shape changes (a cache calls with one value shape): per thread, no
// heap allocation.
inline const WordChunks& word_chunks(int bits, int64_t n) {
  thread_local WordChunks t;
  if (t.bits != bits || t.n != n) {
    const int64_t per = 32 / bits;
    t.bits = bits;
    t.n = n;
    t.row_words = (n + per - 1) / per;
    for (int64_t c = 0; c < n / 8; ++c) {
      const int64_t first = 8 * c / per;
      const int64_t base = t.row_words < 8 ? 0 : std::min(first, t.row_words - 8);
      t.base[c] = static_cast<int32_t>(base);
      for (int64_t l = 0; l < 8; ++l) {
        const int64_t i = 8 * c + l;
        t.word[c][l] = static_cast<uint32_t>(i / per - base);
        t.shift[c][l] = static_cast<uint32_t>(bits * (i % per));
      }
    }
  }
  return t;
}

}  // namespace veloxquant::attention::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The rows' (scale, min) pairs widened into one column per field first (one interleaved load
// per 8 rows for one or two groups per row), then per (group, query) one pass over the rows: the
// scaled weights stored, the bias kept in 8 lanes.
void GroupWeightsImpl(const uint16_t* params, int64_t param_stride, int64_t n, int64_t groups, const float* w,
                      int64_t ld, int64_t n_q, float* columns, float* scaled, float* bias) {
  const hn::CappedTag<float, 8> df;
  const hn::Rebind<uint16_t, decltype(df)> du;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto widen = [&](hn::Vec<decltype(du)> v) HWY_ATTR { return hn::PromoteTo(df, hn::BitCast(dh, v)); };
  const int64_t fields = 2 * groups;
  int64_t j = 0;
  if (param_stride == 2 && fields == 2) {
    for (; j + lanes <= n; j += lanes) {
      hn::Vec<decltype(du)> a, b;
      hn::LoadInterleaved2(du, params + 2 * j, a, b);
      hn::StoreU(widen(a), df, columns + j);
      hn::StoreU(widen(b), df, columns + n + j);
    }
  } else if (param_stride == 4 && fields == 4) {
    for (; j + lanes <= n; j += lanes) {
      hn::Vec<decltype(du)> a, b, c, e;
      hn::LoadInterleaved4(du, params + 4 * j, a, b, c, e);
      hn::StoreU(widen(a), df, columns + j);
      hn::StoreU(widen(b), df, columns + n + j);
      hn::StoreU(widen(c), df, columns + 2 * n + j);
      hn::StoreU(widen(e), df, columns + 3 * n + j);
    }
  }
  for (; j < n; ++j) {
    for (int64_t f = 0; f < fields; ++f) columns[f * n + j] = base::f16_to_f32(params[j * param_stride + f]);
  }
  // The 8-lane bias order is the reference's; narrower targets run the rows one at a time.
  const int64_t whole = lanes == 8 ? n / 8 * 8 : 0;
  HWY_ALIGN float lane_sums[8] = {};
  // One query's rows past the whole vectors, then its bias from the lanes.
  const auto finish = [&](const float* s, const float* m, int64_t g, int64_t r, hn::Vec<decltype(df)> sum) HWY_ATTR {
    const float* wr = w + r * ld;
    float* out = scaled + (g * n_q + r) * n;
    if (whole > 0) {
      hn::Store(sum, df, lane_sums);
    } else {
      std::fill(lane_sums, lane_sums + 8, 0.0f);
    }
    for (int64_t i = whole; i < n; ++i) {
      out[i] = wr[i] * s[i];
      lane_sums[i % 8] = std::fma(wr[i], m[i], lane_sums[i % 8]);
    }
    bias[g * n_q + r] = detail::add_lanes(lane_sums);
  };
  for (int64_t g = 0; g < groups; ++g) {
    const float* s = columns + 2 * g * n;
    const float* m = s + n;
    int64_t r = 0;
    // Three queries per pass (a GQA group of 3): each 8 rows' (scale, min) loaded once for them.
    for (; r + 3 <= n_q; r += 3) {
      const float* w0 = w + r * ld;
      float* o0 = scaled + (g * n_q + r) * n;
      auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df);
      for (int64_t i = 0; i < whole; i += lanes) {
        const auto sv = hn::LoadU(df, s + i), mv = hn::LoadU(df, m + i);
        const auto w0v = hn::LoadU(df, w0 + i), w1v = hn::LoadU(df, w0 + ld + i), w2v = hn::LoadU(df, w0 + 2 * ld + i);
        hn::StoreU(hn::Mul(w0v, sv), df, o0 + i);
        hn::StoreU(hn::Mul(w1v, sv), df, o0 + n + i);
        hn::StoreU(hn::Mul(w2v, sv), df, o0 + 2 * n + i);
        s0 = hn::MulAdd(w0v, mv, s0);
        s1 = hn::MulAdd(w1v, mv, s1);
        s2 = hn::MulAdd(w2v, mv, s2);
      }
      finish(s, m, g, r, s0);
      finish(s, m, g, r + 1, s1);
      finish(s, m, g, r + 2, s2);
    }
    for (; r < n_q; ++r) {
      const float* wr = w + r * ld;
      float* out = scaled + (g * n_q + r) * n;
      auto sum = hn::Zero(df);
      for (int64_t i = 0; i < whole; i += lanes) {
        const auto wv = hn::LoadU(df, wr + i);
        hn::StoreU(hn::Mul(wv, hn::LoadU(df, s + i)), df, out + i);
        sum = hn::MulAdd(wv, hn::LoadU(df, m + i), sum);
      }
      finish(s, m, g, r, sum);
    }
  }
}

void AddGroupBiasesImpl(const float* bias, int64_t n_q, int64_t d, int64_t group, float* out, int64_t out_stride) {
  const hn::CappedTag<float, 8> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_q; ++r) {
    float* o = out + r * out_stride;
    for (int64_t c0 = 0, g = 0; c0 < d; c0 += group, ++g) {
      const float bg = bias[g * n_q + r];
      const auto bv = hn::Set(df, bg);
      const int64_t end = std::min(d, c0 + group);
      int64_t c = c0;
      for (; c + lanes <= end; c += lanes) hn::StoreU(hn::Add(hn::LoadU(df, o + c), bv), df, o + c);
      for (; c < end; ++c) o[c] += bg;
    }
  }
}

// One pass over the rows for kSub chunks [c0, c0 + kSub) of one channel group and NQ queries:
// NQ x kSub accumulators in registers; per row and chunk one permute picks each lane's word (from
// the row loaded whole, or from 8 words loaded at the chunk's base), a per-lane shift and a mask
// give the code, a conversion (or a permute of the level table) the float, and NQ FMAs use it.
// rows: the tile; wg, bg: the weights and biases of this pass's channel group and first query;
// acc: that query's accumulator row.
template <int NQ, int kSub, bool kWhole, bool kLevels>
void word_values_pass(const WordValueRows& rows, const detail::WordChunks& t, int64_t c0, const float* wg,
                      const float* bg, float* acc, int64_t acc_stride) {
  const uint32_t* first_row = rows.first_row;
  const int64_t row_stride = rows.row_stride_words, n_rows = rows.n_rows;
  const float* levels = rows.levels;
  const int bits = rows.bits;
  const hn::CappedTag<float, 8> df;
  const hn::RebindToUnsigned<decltype(df)> di;
  hn::Vec<decltype(df)> a[NQ][kSub];
  for (int r = 0; r < NQ; ++r) {
    for (int u = 0; u < kSub; ++u) {
      a[r][u] = hn::LoadU(df, acc + r * acc_stride + 8 * (c0 + u));
      if (bg != nullptr) a[r][u] = hn::Add(a[r][u], hn::Set(df, bg[r]));
    }
  }
  // x86's lane permutes read only the low 3 bits of an index: with the table repeating every
  // 2^b entries the shifted word needs no mask before the level lookup.
  constexpr bool kUnmaskedLookup = kLevels && HWY_ARCH_X86;
  HWY_ALIGN float table[8];
  const int n_levels = 1 << bits;
  for (int l = 0; l < 8; ++l) table[l] = kLevels ? levels[l % n_levels] : 0.0f;
  const auto level_table = hn::Load(df, table);
  const auto mask = hn::Set(di, static_cast<uint32_t>(n_levels - 1));
  const auto row_mask = hn::FirstN(di, static_cast<std::size_t>(std::min<int64_t>(t.row_words, 8)));
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint32_t* row = first_row + j * row_stride;
    hn::Vec<decltype(df)> w[NQ];
    for (int r = 0; r < NQ; ++r) w[r] = hn::Set(df, wg[r * n_rows + j]);
    hn::Vec<decltype(di)> whole_row;
    if (kWhole) whole_row = hn::MaskedLoad(row_mask, di, row);
    for (int u = 0; u < kSub; ++u) {
      const int64_t c = c0 + u;
      const auto words = kWhole ? whole_row : hn::LoadU(di, row + t.base[c]);
      const auto picked = hn::TableLookupLanes(words, hn::IndicesFromVec(di, hn::LoadU(di, t.word[c])));
      const auto shifted = hn::Shr(picked, hn::LoadU(di, t.shift[c]));
      const auto code = kUnmaskedLookup ? shifted : hn::And(shifted, mask);
      const auto x =
          kLevels ? hn::TableLookupLanes(level_table, hn::IndicesFromVec(df, code)) : hn::ConvertTo(df, code);
      for (int r = 0; r < NQ; ++r) a[r][u] = hn::MulAdd(w[r], x, a[r][u]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int u = 0; u < kSub; ++u) hn::StoreU(a[r][u], df, acc + r * acc_stride + 8 * (c0 + u));
  }
}

#if !HWY_HAVE_SCALABLE && HWY_MAX_BYTES >= 64
// AVX-512, rows of at most 8 words: word_values_pass with two 8-lane chunks (c, c + 1) per
// 16-lane vector, kVec vectors per pass (chunks [c0, c0 + 2 kVec), all in one channel group).
// The row sits in the low 8 lanes; each chunk's word indices (< 8) pick from there, the level
// table repeats every 2^b of its 16 lanes. Every lane runs the 8-lane pass's FMA chain over the
// rows: bit-identical sums at twice the width.
template <int NQ, int kVec, bool kLevels>
void word_values_pass_wide(const WordValueRows& rows, const detail::WordChunks& t, int64_t c0, const float* wg,
                           const float* bg, float* acc, int64_t acc_stride) {
  const uint32_t* first_row = rows.first_row;
  const int64_t row_stride = rows.row_stride_words, n_rows = rows.n_rows;
  const float* levels = rows.levels;
  const int bits = rows.bits;
  const hn::CappedTag<float, 16> df;
  const hn::RebindToUnsigned<decltype(df)> di;
  const hn::CappedTag<uint32_t, 8> d8;
  hn::Vec<decltype(df)> a[NQ][kVec];
  for (int r = 0; r < NQ; ++r) {
    for (int u = 0; u < kVec; ++u) {
      a[r][u] = hn::LoadU(df, acc + r * acc_stride + 8 * c0 + 16 * u);
      if (bg != nullptr) a[r][u] = hn::Add(a[r][u], hn::Set(df, bg[r]));
    }
  }
  constexpr bool kUnmaskedLookup = kLevels && HWY_ARCH_X86;
  HWY_ALIGN float table[16];
  const int n_levels = 1 << bits;
  for (int l = 0; l < 16; ++l) table[l] = kLevels ? levels[l % n_levels] : 0.0f;
  const auto level_table = hn::Load(df, table);
  const auto mask = hn::Set(di, static_cast<uint32_t>(n_levels - 1));
  const auto row_mask = hn::FirstN(d8, static_cast<std::size_t>(std::min<int64_t>(t.row_words, 8)));
  hn::Vec<decltype(di)> index[kVec], shift[kVec];
  for (int u = 0; u < kVec; ++u) {
    index[u] = hn::LoadU(di, t.word[c0 + 2 * u]);  // chunks c and c + 1 side by side
    shift[u] = hn::LoadU(di, t.shift[c0 + 2 * u]);
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint32_t* row = first_row + j * row_stride;
    hn::Vec<decltype(df)> w[NQ];
    for (int r = 0; r < NQ; ++r) w[r] = hn::Set(df, wg[r * n_rows + j]);
    const auto low = hn::MaskedLoad(row_mask, d8, row);
    const auto words = hn::Combine(di, low, low);
    for (int u = 0; u < kVec; ++u) {
      const auto picked = hn::TableLookupLanes(words, hn::IndicesFromVec(di, index[u]));
      const auto shifted = hn::Shr(picked, shift[u]);
      const auto code = kUnmaskedLookup ? shifted : hn::And(shifted, mask);
      const auto x =
          kLevels ? hn::TableLookupLanes(level_table, hn::IndicesFromVec(df, code)) : hn::ConvertTo(df, code);
      for (int r = 0; r < NQ; ++r) a[r][u] = hn::MulAdd(w[r], x, a[r][u]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int u = 0; u < kVec; ++u) hn::StoreU(a[r][u], df, acc + r * acc_stride + 8 * c0 + 16 * u);
  }
}
#endif

// Queries [r, r + NQ) of `out`: every 8-channel chunk of the rows, a few chunks per pass.
template <int NQ, bool kWhole, bool kLevels>
void word_values_block(const WordValueRows& rows, const detail::WordChunks& t, const GroupValueTargets& out,
                       int64_t r) {
  // Four chunks per pass where a group holds them (NQ x 4 accumulators and NQ weights: 15 of 16
  // registers for a GQA group of 3), fewer otherwise; a pass never crosses a channel group.
  const int64_t chunks = rows.n / 8, group = rows.group, n_rows = rows.n_rows;
  float* acc = out.acc + r * out.acc_stride;
  const int64_t acc_stride = out.acc_stride;
  for (int64_t c = 0; c < chunks;) {
    const int64_t g = 8 * c / group;
    const float* wg = out.ws + g * out.n_q * n_rows + r * n_rows;
    const float* bg = out.bias != nullptr ? out.bias + g * out.n_q + r : nullptr;
#if !HWY_HAVE_SCALABLE && HWY_MAX_BYTES >= 64
    if constexpr (kWhole && hn::MaxLanes(hn::CappedTag<float, 16>()) == 16) {
      if (group % 64 == 0 && c % 8 == 0 && c + 8 <= chunks) {
        word_values_pass_wide<NQ, 4, kLevels>(rows, t, c, wg, bg, acc, acc_stride);
        c += 8;
        continue;
      }
      if (group % 32 == 0 && c % 4 == 0 && c + 4 <= chunks) {
        word_values_pass_wide<NQ, 2, kLevels>(rows, t, c, wg, bg, acc, acc_stride);
        c += 4;
        continue;
      }
      if (group % 16 == 0 && c % 2 == 0 && c + 2 <= chunks) {
        word_values_pass_wide<NQ, 1, kLevels>(rows, t, c, wg, bg, acc, acc_stride);
        c += 2;
        continue;
      }
    }
#endif
    if (group % 32 == 0 && c % 4 == 0 && c + 4 <= chunks) {
      word_values_pass<NQ, 4, kWhole, kLevels>(rows, t, c, wg, bg, acc, acc_stride);
      c += 4;
    } else if (group % 16 == 0 && c % 2 == 0 && c + 2 <= chunks) {
      word_values_pass<NQ, 2, kWhole, kLevels>(rows, t, c, wg, bg, acc, acc_stride);
      c += 2;
    } else {
      word_values_pass<NQ, 1, kWhole, kLevels>(rows, t, c, wg, bg, acc, acc_stride);
      c += 1;
    }
  }
}

template <bool kWhole, bool kLevels>
void word_values(const WordValueRows& rows, const detail::WordChunks& t, const GroupValueTargets& out) {
  int64_t r = 0;
  for (; r + 3 <= out.n_q; r += 3) word_values_block<3, kWhole, kLevels>(rows, t, out, r);
  for (; r < out.n_q; ++r) word_values_block<1, kWhole, kLevels>(rows, t, out, r);
}

bool AccumulateWordValuesImpl(const WordValueRows& rows, const GroupValueTargets& out) {
  const hn::CappedTag<float, 8> d8;
  if (hn::Lanes(d8) != 8) return false;  // the kernel's chunks are 8 lanes
  const detail::WordChunks& t = detail::word_chunks(rows.bits, rows.n);
  const bool whole = t.row_words <= 8;
  const bool levels = rows.levels != nullptr;
  if (whole && levels) {
    word_values<true, true>(rows, t, out);
  } else if (whole) {
    word_values<true, false>(rows, t, out);
  } else if (levels) {
    word_values<false, true>(rows, t, out);
  } else {
    word_values<false, false>(rows, t, out);
  }
  return true;
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(GroupWeightsImpl);
HWY_EXPORT(AddGroupBiasesImpl);
HWY_EXPORT(AccumulateWordValuesImpl);

void group_weights(const uint16_t* params, int64_t param_stride, int64_t n, int64_t groups, const float* w, int64_t ld,
                   int64_t n_q, float* columns, float* scaled, float* bias) {
  HWY_DYNAMIC_DISPATCH(GroupWeightsImpl)(params, param_stride, n, groups, w, ld, n_q, columns, scaled, bias);
}

void add_group_biases(const float* bias, int64_t n_q, int64_t d, int64_t group, float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(AddGroupBiasesImpl)(bias, n_q, d, group, out, out_stride);
}

bool can_accumulate_word_values(int bits, int64_t n, int64_t group, bool levels) {
  return bits >= 1 && bits <= 8 && n > 0 && n % 8 == 0 && n <= 8 * detail::kMaxWordChunks && group > 0 &&
         group % 8 == 0 && (!levels || bits <= 3);
}

void accumulate_word_values(const WordValueRows& rows, const GroupValueTargets& out) {
  if (!HWY_DYNAMIC_DISPATCH(AccumulateWordValuesImpl)(rows, out)) scalar::accumulate_word_values(rows, out);
}

namespace scalar {

void group_weights(const uint16_t* params, int64_t param_stride, int64_t n, int64_t groups, const float* w, int64_t ld,
                   int64_t n_q, float* /*columns*/, float* scaled, float* bias) {
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < n_q; ++r) {
      float lane[8] = {};
      for (int64_t j = 0; j < n; ++j) {
        const float s = base::f16_to_f32(params[j * param_stride + 2 * g]);
        const float m = base::f16_to_f32(params[j * param_stride + 2 * g + 1]);
        scaled[(g * n_q + r) * n + j] = w[r * ld + j] * s;
        lane[j % 8] = std::fma(w[r * ld + j], m, lane[j % 8]);
      }
      bias[g * n_q + r] = detail::add_lanes(lane);
    }
  }
}

void add_group_biases(const float* bias, int64_t n_q, int64_t d, int64_t group, float* out, int64_t out_stride) {
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t c = 0; c < d; ++c) out[r * out_stride + c] += bias[(c / group) * n_q + r];
  }
}

void accumulate_word_values(const WordValueRows& rows, const GroupValueTargets& out) {
  const auto [first_row, row_stride_words, n_rows, n, bits, group, levels] = rows;
  const auto [ws, bias, n_q, acc, acc_stride] = out;
  const int64_t per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t r = 0; r < n_q; ++r) {
    if (bias != nullptr) {
      for (int64_t i = 0; i < n; ++i) acc[r * acc_stride + i] += bias[(i / group) * n_q + r];
    }
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint32_t* row = first_row + j * row_stride_words;
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t code = (row[i / per] >> (bits * (i % per))) & mask;
        const float x = levels != nullptr ? levels[code] : static_cast<float>(code);
        const float wj = ws[((i / group) * n_q + r) * n_rows + j];
        acc[r * acc_stride + i] = std::fma(wj, x, acc[r * acc_stride + i]);
      }
    }
  }
}

}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
