// Highway kernels for split_level_key_scores.h, compiled once per target and dispatched at run
// time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/split_level_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/dense_code_lookup-inl.h"
#include "veloxquant/attention/split_level_key_scores.h"

#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

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

// The 8 codes of chunk c of a group of `chunks` chunks (B bytes each) as the low 8B bits of a
// 32-bit word; the bits above may hold the next chunk's codes (the lookups mask them). Always one
// 4-byte load inside the group: a B-byte memcpy (B = 3) went through the stack and the 4-byte
// reload stalled on store forwarding, ~45% of the q3 decode step (perf).
template <int B>
HWY_INLINE uint32_t chunk_word(const uint8_t* group, int c, int chunks) {
  uint32_t word = 0;
  if (B == 4 || c * B + 4 <= chunks * B) {
    std::memcpy(&word, group + c * B, 4);
    return word;
  }
  if (chunks * B >= 4) {  // the last chunk: the 4 bytes that end with it
    std::memcpy(&word, group + c * B + B - 4, 4);
    return word >> (8 * (4 - B));
  }
  for (int i = 0; i < B; ++i) word |= static_cast<uint32_t>(group[c * B + i]) << (8 * i);
  return word;
}

// One group's t[r] for NQ queries: chunks of 8 codes of B bits (B bytes each, read inside the
// group).
// C: chunks known at compile time (0: `chunks`), so the usual group sizes unroll whole and
// their query vectors stay in registers across rows.
template <int B, int C, int NQ, class DF>
HWY_INLINE void group_sums(DF df, const GroupTables<DF>& tables, hn::Vec<hn::RebindToUnsigned<DF>> shifts,
                           const uint8_t* codes, int chunks, const float* q, int64_t q_stride, hn::Vec<DF>* t) {
  const hn::RebindToUnsigned<DF> du32;
  const int n = C > 0 ? C : chunks;
#pragma GCC unroll 8
  for (int c = 0; c < n; ++c) {
    const auto index = hn::Shr(hn::Set(du32, chunk_word<B>(codes, c, n)), shifts);
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

// Group g of every row of the tile into the rows' partial sums acc[j][r] (8 lanes each): the
// first group writes them, later ones add with one FMA. Group by group rather than row by row,
// so the width and size are compile-time in the loop over rows.
template <int B, int C, int NQ>
void group_rows(const SplitLevelKeys& k, int g, const float* q, int64_t q_stride, float* acc) {
  using DF = hn::CappedTag<float, 8>;
  const DF df;
  const hn::RebindToUnsigned<DF> du32;
  HWY_ALIGN float low[8], high[8];
  HWY_ALIGN uint32_t shift[8];
  const int mask = (1 << B) - 1;
  for (int i = 0; i < 8; ++i) {
    low[i] = k.levels[g][i & mask];
    high[i] = k.levels[g][(8 + i) & mask];
    shift[i] = static_cast<uint32_t>(B * i);
  }
  GroupTables<DF> tables{hn::Load(df, low), hn::Load(df, high)};
  const auto shifts = hn::Load(du32, shift);
  const float* qg = q + k.offset[g];
  const int chunks = k.channels[g] / 8;
  const uint8_t* codes = k.codes + k.code_offset[g];
  const uint8_t* scale_codes = k.scales + g;
  const bool first = g == 0;
  for (int64_t j = 0; j < k.n_rows; ++j) {
    hn::Vec<DF> t[NQ];
    group_sums<B, C, NQ>(df, tables, shifts, codes + j * k.code_stride, chunks, qg, q_stride, t);
    const auto scale = hn::Set(df, k.scale_table[scale_codes[j * k.scale_stride]]);
    float* a = acc + j * NQ * 8;
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
      const auto v = first ? hn::Mul(t[r], scale) : hn::MulAdd(t[r], scale, hn::LoadU(df, a + 8 * r));
      hn::StoreU(v, df, a + 8 * r);
    }
  }
}

template <int B, int NQ>
void group_rows_sized(const SplitLevelKeys& k, int g, const float* q, int64_t q_stride, float* acc) {
  switch (k.channels[g]) {
    case 16:
      return group_rows<B, 2, NQ>(k, g, q, q_stride, acc);
    case 24:
      return group_rows<B, 3, NQ>(k, g, q, q_stride, acc);
    case 32:
      return group_rows<B, 4, NQ>(k, g, q, q_stride, acc);
    case 40:
      return group_rows<B, 5, NQ>(k, g, q, q_stride, acc);
    default:
      return group_rows<B, 0, NQ>(k, g, q, q_stride, acc);
  }
}

// Row by row with the whole layout known at compile time (up to 3 groups; C2 = 0: two groups):
// every partial sum stays in registers, no per-group pass over the tile. The same operations in
// the same order as group_rows + the final tree, so results are identical.
template <int NQ, int B0, int C0, int B1, int C1, int B2, int C2>
void score_layout(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, float* scores,
                  int64_t ld) {
  using DF = hn::CappedTag<float, 8>;
  const DF df;
  const hn::RebindToUnsigned<DF> du32;
  constexpr int kGroups = C2 > 0 ? 3 : 2;
  constexpr int kBits[3] = {B0, B1, B2};
  GroupTables<DF> tables[3];
  hn::Vec<decltype(du32)> shifts[3];
  for (int g = 0; g < kGroups; ++g) {
    HWY_ALIGN float low[8], high[8];
    HWY_ALIGN uint32_t shift[8];
    const int mask = (1 << kBits[g]) - 1;
    for (int i = 0; i < 8; ++i) {
      low[i] = k.levels[g][i & mask];
      high[i] = k.levels[g][(8 + i) & mask];
      shift[i] = static_cast<uint32_t>(kBits[g] * i);
    }
    tables[g] = GroupTables<DF>{hn::Load(df, low), hn::Load(df, high)};
    shifts[g] = hn::Load(du32, shift);
  }
  float biases[NQ];
  for (int r = 0; r < NQ; ++r) biases[r] = bias != nullptr ? bias[r] : 0.0f;
  const float* q0 = q + k.offset[0];
  const float* q1 = q + k.offset[1];
  const float* q2 = q + k.offset[kGroups - 1];
  for (int64_t j = 0; j < k.n_rows; ++j) {
    const uint8_t* row = k.codes + j * k.code_stride;
    const uint8_t* sc = k.scales + j * k.scale_stride;
    hn::Vec<DF> t[NQ], acc[NQ];
    group_sums<B0, C0, NQ>(df, tables[0], shifts[0], row + k.code_offset[0], C0, q0, q_stride, t);
    const auto s0 = hn::Set(df, k.scale_table[sc[0]]);
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) acc[r] = hn::Mul(t[r], s0);
    group_sums<B1, C1, NQ>(df, tables[1], shifts[1], row + k.code_offset[1], C1, q1, q_stride, t);
    const auto s1 = hn::Set(df, k.scale_table[sc[1]]);
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) acc[r] = hn::MulAdd(t[r], s1, acc[r]);
    if constexpr (C2 > 0) {
      group_sums<B2, C2, NQ>(df, tables[2], shifts[2], row + k.code_offset[2], C2, q2, q_stride, t);
      const auto s2 = hn::Set(df, k.scale_table[sc[2]]);
#pragma GCC unroll 4
      for (int r = 0; r < NQ; ++r) acc[r] = hn::MulAdd(t[r], s2, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) scores[r * ld + j] = tree_sum(df, acc[r]) + biases[r];
  }
}

// The layouts screened for q3 (docs/frontier.md) take score_layout; true when one did.
template <int NQ>
bool score_known_layout(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, float* scores,
                        int64_t ld) {
  const auto is = [&](std::initializer_list<std::pair<int, int>> groups) {
    if (static_cast<int>(groups.size()) != k.n_groups) return false;
    int g = 0;
    for (const auto& [channels, bits] : groups) {
      if (k.channels[g] != channels || k.bits[g] != bits) return false;
      ++g;
    }
    return true;
  };
  if (is({{32, 4}, {16, 3}, {16, 2}})) {
    score_layout<NQ, 4, 4, 3, 2, 2, 2>(k, q, q_stride, bias, scores, ld);
  } else if (is({{24, 4}, {40, 3}})) {
    score_layout<NQ, 4, 3, 3, 5, 1, 0>(k, q, q_stride, bias, scores, ld);
  } else if (is({{32, 4}, {32, 3}})) {
    score_layout<NQ, 4, 4, 3, 4, 1, 0>(k, q, q_stride, bias, scores, ld);
  } else if (is({{32, 4}, {32, 2}})) {
    score_layout<NQ, 4, 4, 2, 4, 1, 0>(k, q, q_stride, bias, scores, ld);
  } else {
    return false;
  }
  return true;
}

template <int NQ>
void score_queries(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, float* scores,
                   int64_t ld) {
  if (score_known_layout<NQ>(k, q, q_stride, bias, scores, ld)) return;
  using DF = hn::CappedTag<float, 8>;
  const DF df;
  // The tile's partial sums: rows x NQ x 8 lanes (64 rows x 4 queries: 8 KiB).
  thread_local std::vector<float> buffer;
  const auto need = static_cast<std::size_t>(k.n_rows * NQ * 8);
  if (buffer.size() < need) buffer.resize(need);
  float* acc = buffer.data();
  for (int g = 0; g < k.n_groups; ++g) {
    switch (k.bits[g]) {
      case 1:
        group_rows_sized<1, NQ>(k, g, q, q_stride, acc);
        break;
      case 2:
        group_rows_sized<2, NQ>(k, g, q, q_stride, acc);
        break;
      case 3:
        group_rows_sized<3, NQ>(k, g, q, q_stride, acc);
        break;
      default:
        group_rows_sized<4, NQ>(k, g, q, q_stride, acc);
        break;
    }
  }
  float biases[NQ];
  for (int r = 0; r < NQ; ++r) biases[r] = bias != nullptr ? bias[r] : 0.0f;
  for (int64_t j = 0; j < k.n_rows; ++j) {
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
      scores[r * ld + j] = tree_sum(df, hn::LoadU(df, acc + (j * NQ + r) * 8)) + biases[r];
    }
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
