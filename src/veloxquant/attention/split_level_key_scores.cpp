// Highway kernels for split_level_key_scores.h, compiled once per target and dispatched at run
// time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/split_level_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/dense_code_lookup-inl.h"
#include "veloxquant/attention/split_level_key_scores.h"

#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// 8 lanes of f32: the chunk of 8 codes is one vector.
bool SplitSupportedImpl() { return hn::MaxLanes(hn::CappedTag<float, 8>()) == 8; }

template <class DF>
struct GroupTables {
  hn::Vec<DF> low, high;  // levels 0..7 and 8..15 (b <= 3: the levels repeated, high unused)
};

// One group's t[r] for NQ queries: chunks of 8 codes of B bits (B bytes each, read exactly).
template <int B, int NQ, class DF>
HWY_INLINE void group_sums(DF df, const GroupTables<DF>& tables, const uint8_t* codes, int chunks, const float* q,
                           int64_t q_stride, hn::Vec<DF>* t) {
  const hn::RebindToUnsigned<DF> du32;
  HWY_ALIGN static constexpr uint32_t kShift[8] = {0 * B, 1 * B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B};
  const auto shifts = hn::Load(du32, kShift);
  for (int c = 0; c < chunks; ++c) {
    uint32_t word = 0;
    std::memcpy(&word, codes + c * B, B);  // exactly the chunk's bytes: no read past the row
    const auto index = hn::Shr(hn::Set(du32, word), shifts);
    hn::Vec<DF> level = permute_lanes8(df, tables.low, index);
    if constexpr (B == 4) {
      const auto high = permute_lanes8(df, tables.high, index);
      const auto top = hn::RebindMask(df, hn::TestBit(index, hn::Set(du32, 8u)));
      level = hn::IfThenElse(top, high, level);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
      const auto qv = hn::LoadU(df, q + r * q_stride + 8 * c);
      t[r] = c == 0 ? hn::Mul(level, qv) : hn::MulAdd(level, qv, t[r]);
    }
  }
}

// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)), the scalar reference's order.
template <class DF>
HWY_INLINE float tree_sum(DF df, hn::Vec<DF> v) {
  const auto pairs = hn::Add(v, hn::Shuffle2301(v));          // lane 2i: a_2i + a_2i+1
  const auto quads = hn::Add(pairs, hn::Shuffle1032(pairs));  // lane 0 / 4: the two quads
  const hn::Half<DF> dh;
  return hn::GetLane(hn::LowerHalf(dh, quads)) + hn::GetLane(hn::UpperHalf(dh, quads));
}

template <int NQ>
void score_queries(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, float* scores,
                   int64_t ld) {
  using DF = hn::CappedTag<float, 8>;
  const DF df;
  using VF = hn::Vec<DF>;
  GroupTables<DF> tables[SplitLevelKeys::kMaxGroups];
  for (int g = 0; g < k.n_groups; ++g) {
    HWY_ALIGN float low[8], high[8];
    const int mask = (1 << k.bits[g]) - 1;
    for (int i = 0; i < 8; ++i) {
      low[i] = k.levels[g][i & mask];
      high[i] = k.levels[g][(8 + i) & mask];
    }
    tables[g].low = hn::Load(df, low);
    tables[g].high = hn::Load(df, high);
  }
  float biases[NQ];
  for (int r = 0; r < NQ; ++r) biases[r] = bias != nullptr ? bias[r] : 0.0f;
  for (int64_t j = 0; j < k.n_rows; ++j) {
    const uint8_t* row = k.codes + j * k.code_stride;
    const uint8_t* scale_codes = k.scales + j * k.scale_stride;
    VF acc[NQ];
    for (int g = 0; g < k.n_groups; ++g) {
      VF t[NQ];
      const uint8_t* codes = row + k.code_offset[g];
      const float* qg = q + k.offset[g];
      const int chunks = k.channels[g] / 8;
      switch (k.bits[g]) {
        case 1:
          group_sums<1, NQ, DF>(df, tables[g], codes, chunks, qg, q_stride, t);
          break;
        case 2:
          group_sums<2, NQ, DF>(df, tables[g], codes, chunks, qg, q_stride, t);
          break;
        case 3:
          group_sums<3, NQ, DF>(df, tables[g], codes, chunks, qg, q_stride, t);
          break;
        default:
          group_sums<4, NQ, DF>(df, tables[g], codes, chunks, qg, q_stride, t);
          break;
      }
      const VF scale = hn::Set(df, k.scale_table[scale_codes[g]]);
#pragma GCC unroll 4
      for (int r = 0; r < NQ; ++r) acc[r] = g == 0 ? hn::Mul(t[r], scale) : hn::MulAdd(t[r], scale, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) scores[r * ld + j] = tree_sum(df, acc[r]) + biases[r];
  }
}

void ScoreSplitImpl(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, int64_t n_q,
                    float* scores, int64_t ld) {
  if constexpr (hn::MaxLanes(hn::CappedTag<float, 8>()) == 8) {
    int64_t r = 0;
    for (; r + 4 <= n_q; r += 4) {
      score_queries<4>(k, q + r * q_stride, q_stride, bias != nullptr ? bias + r : nullptr, scores + r * ld, ld);
    }
    const float* br = bias != nullptr ? bias + r : nullptr;
    switch (n_q - r) {
      case 3:
        return score_queries<3>(k, q + r * q_stride, q_stride, br, scores + r * ld, ld);
      case 2:
        return score_queries<2>(k, q + r * q_stride, q_stride, br, scores + r * ld, ld);
      case 1:
        return score_queries<1>(k, q + r * q_stride, q_stride, br, scores + r * ld, ld);
      default:
        return;
    }
  }
  scalar::score_split_level_rows(k, q, q_stride, bias, n_q, scores, ld);
}
#else
bool SplitSupportedImpl() { return false; }
void ScoreSplitImpl(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, int64_t n_q,
                    float* scores, int64_t ld) {
  scalar::score_split_level_rows(k, q, q_stride, bias, n_q, scores, ld);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

namespace veloxquant::attention::kernels {
HWY_EXPORT(SplitSupportedImpl);
HWY_EXPORT(ScoreSplitImpl);

bool valid_split_level_keys(const SplitLevelKeys& k) {
  if (k.n_groups < 1 || k.n_groups > SplitLevelKeys::kMaxGroups || k.scale_table == nullptr) return false;
  for (int g = 0; g < k.n_groups; ++g) {
    if (k.channels[g] < 8 || k.channels[g] % 8 != 0 || k.bits[g] < 1 || k.bits[g] > 4 || k.levels[g] == nullptr) {
      return false;
    }
  }
  return true;
}

void score_split_level_rows(const SplitLevelKeys& keys, const float* q, int64_t q_stride, const float* bias,
                            int64_t n_q, float* scores, int64_t ld) {
  if (keys.n_rows <= 0 || n_q <= 0) return;
  static const bool supported = HWY_DYNAMIC_DISPATCH(SplitSupportedImpl)();
  if (!supported) return scalar::score_split_level_rows(keys, q, q_stride, bias, n_q, scores, ld);
  HWY_DYNAMIC_DISPATCH(ScoreSplitImpl)(keys, q, q_stride, bias, n_q, scores, ld);
}

namespace scalar {
void score_split_level_rows(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, int64_t n_q,
                            float* scores, int64_t ld) {
  for (int64_t r = 0; r < n_q; ++r) {
    const float* qr = q + r * q_stride;
    for (int64_t j = 0; j < k.n_rows; ++j) {
      const uint8_t* row = k.codes + j * k.code_stride;
      float acc[8] = {};
      for (int g = 0; g < k.n_groups; ++g) {
        const int b = k.bits[g];
        float t[8] = {};
        for (int c = 0; c < k.channels[g] / 8; ++c) {
          for (int l = 0; l < 8; ++l) {
            const int i = 8 * c + l, bit = i * b;  // code i of the group, LSB first
            const uint8_t* at = row + k.code_offset[g] + bit / 8;
            const unsigned window = at[0] | (bit % 8 + b > 8 ? static_cast<unsigned>(at[1]) << 8 : 0u);
            const unsigned code = (window >> (bit % 8)) & ((1u << b) - 1);
            const float product = k.levels[g][code];
            const float x = qr[k.offset[g] + i];
            t[l] = c == 0 ? product * x : std::fma(product, x, t[l]);
          }
        }
        const float s = k.scale_table[k.scales[j * k.scale_stride + g]];
        for (int l = 0; l < 8; ++l) acc[l] = g == 0 ? t[l] * s : std::fma(t[l], s, acc[l]);
      }
      const float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      scores[r * ld + j] = sum + (bias != nullptr ? bias[r] : 0.0f);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
