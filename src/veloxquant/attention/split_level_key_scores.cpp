// Highway kernels for split_level_key_scores.h, compiled once per target and dispatched at run
// time. AVX3_DL (AVX-512 with VBMI) is compiled in too: its byte permute reads two rows' codes
// per 512-bit vector (score_layout_pairs).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/split_level_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/dense_code_lookup-inl.h"
#include "veloxquant/attention/split_level_key_scores.h"

#include <algorithm>
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
    std::memcpy(&word, group + static_cast<int64_t>(c) * B, 4);
    return word;
  }
  if (chunks * B >= 4) {  // the last chunk: the 4 bytes that end with it
    std::memcpy(&word, group + static_cast<int64_t>(c) * B + B - 4, 4);
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
      const auto qv = hn::LoadU(df, q + r * q_stride + int64_t{8} * c);
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
      const auto v = first ? hn::Mul(t[r], scale) : hn::MulAdd(t[r], scale, hn::LoadU(df, a + int64_t{8} * r));
      hn::StoreU(v, df, a + int64_t{8} * r);
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

#if HWY_TARGET == HWY_AVX3_DL
// score_layout on 512-bit vectors: two rows per vector (row j in lanes 0-7, row j + 1 in lanes
// 8-15), so every lane does what the scalar reference's lane l does for its row, in the same
// order (bit for bit). Per pair of rows one masked 64-byte load holds both rows' codes; per quad
// of up to 4 chunks of a group one byte permute (VBMI) gathers into each 64-bit lane the byte
// pairs that hold its two codes of every chunk, one multishift moves code l of chunk k to byte k
// of 32-bit lane l, and one 32-bit shift per chunk after the first brings its byte down (5
// instructions for 4 chunks, against 8 for a byte permute and a variable shift per chunk); one
// lane permute per chunk looks the level up in a 16-entry table (entry i = level[i mod 2^B]: no
// mask, no second table at 4 bits). The query chunks are
// duplicated into both halves once per call. The final sums of 16 rows are one transposing tree
// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) per row in 7 shuffles and 7 adds, then one
// permute back to row order: no per-row horizontal sum. The 16 rows' scales come with one masked
// load, a byte permute and one gather per group.

// bytes < 64 set in a byte mask.
HWY_INLINE __mmask64 first_bytes(int64_t bytes) { return bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1; }

// Code bytes of one row (the groups' codes end there).
HWY_INLINE int row_code_bytes(const SplitLevelKeys& k) {
  int end = 0;
  for (int g = 0; g < k.n_groups; ++g) end = std::max(end, k.code_offset[g] + k.channels[g] * k.bits[g] / 8);
  return end;
}

// Whether score_layout_pairs can read the rows: a row pair's codes in 64 bytes, 16 rows' scales
// in 64 bytes.
HWY_INLINE bool pairs_fit(const SplitLevelKeys& k, int row_bytes) {
  return k.code_stride >= 0 && k.code_stride + row_bytes <= 64 && k.scale_stride >= 0 &&
         15 * k.scale_stride + k.n_groups <= 64;
}

// One pair's t[r] for a group of C chunks of B bits; `quad` is the group's first quad and
// `chunk` its first chunk overall (the query's).
template <int C, int NQ>
HWY_INLINE void pair_group(__m512i codes, const __m512i* gather, const __m512i* control, __m512i table,
                           const float (*qd)[16], int quad, int chunk, __m512* t) {
#pragma GCC unroll 2
  for (int c0 = 0; c0 < C; c0 += 4) {
    const __m512i spread =
        _mm512_multishift_epi64_epi8(control[quad + c0 / 4], _mm512_permutexvar_epi8(gather[quad + c0 / 4], codes));
#pragma GCC unroll 4
    for (int c = c0; c < std::min(C, c0 + 4); ++c) {
      const __m512i index = c == c0 ? spread : _mm512_srli_epi32(spread, 8 * (c - c0));
      const __m512 level = _mm512_permutexvar_ps(index, _mm512_castsi512_ps(table));
#pragma GCC unroll 4
      for (int r = 0; r < NQ; ++r) {
        const __m512 qv = _mm512_load_ps(qd[(chunk + c) * NQ + r]);
        t[r] = c == 0 ? _mm512_mul_ps(level, qv) : _mm512_fmadd_ps(level, qv, t[r]);
      }
    }
  }
}

// The byte permute and multishift tables of every quad of a layout at one code stride and group
// offsets (built once per thread and layout, rebuilt when those change: they are per cache).
template <int B0, int C0, int B1, int C1, int B2, int C2>
struct PairTables {
  static constexpr int kQuads = (C0 + 3) / 4 + (C1 + 3) / 4 + (C2 + 3) / 4;
  int64_t code_stride = -1;
  int code_offset[3] = {-1, -1, -1};
  HWY_ALIGN uint8_t gather[kQuads][64] = {};
  HWY_ALIGN uint8_t control[kQuads][64] = {};

  const PairTables& for_keys(const SplitLevelKeys& k) {
    if (k.code_stride == code_stride && k.code_offset[0] == code_offset[0] && k.code_offset[1] == code_offset[1] &&
        k.code_offset[2] == code_offset[2]) {
      return *this;
    }
    code_stride = k.code_stride;
    for (int g = 0; g < 3; ++g) code_offset[g] = k.code_offset[g];
    const int bits[3] = {B0, B1, B2}, chunks[3] = {C0, C1, C2};
    for (int g = 0, q = 0; g < 3; ++g) {
      for (int c0 = 0; c0 < chunks[g]; c0 += 4, ++q) {
        const int b = bits[g];
        for (int m = 0; m < 8; ++m) {  // 64-bit lane m: row m / 4, codes 2 (m % 4) and 2 (m % 4) + 1
          for (int kk = 0; kk < std::min(4, chunks[g] - c0); ++kk) {
            const int bit = b * (8 * (c0 + kk) + 2 * (m % 4));
            const int byte = static_cast<int>(m / 4 * code_stride) + code_offset[g] + bit / 8;
            gather[q][8 * m + 2 * kk] = static_cast<uint8_t>(byte);
            gather[q][8 * m + 2 * kk + 1] = static_cast<uint8_t>(std::min(byte + 1, 63));
            for (int h = 0; h < 2; ++h) {  // byte kk of 32-bit lane 2m + h: code 2 (m % 4) + h
              control[q][8 * m + 4 * h + kk] = static_cast<uint8_t>(16 * kk + bit % 8 + h * b);
            }
          }
        }
      }
    }
    return *this;
  }
};

// Within each 128-bit lane: (a0 + a1, a2 + a3, b0 + b1, b2 + b3).
HWY_INLINE __m512 pair_sums(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
}

template <int NQ, int B0, int C0, int B1, int C1, int B2, int C2>
void score_layout_pairs(const SplitLevelKeys& k, int row_bytes, const float* q, int64_t q_stride, const float* bias,
                        float* scores, int64_t ld) {
  constexpr int kGroups = C2 > 0 ? 3 : 2;
  constexpr int kBits[3] = {B0, B1, B2};
  constexpr int kChunks[3] = {C0, C1, C2};
  constexpr int kAll = C0 + C1 + C2;
  // The per-call setup in vector code (a scalar loop over lanes cost ~40 instructions per row of
  // a 64-row tile); the quad tables once per cache.
  thread_local PairTables<B0, C0, B1, C1, B2, C2> pair_tables;
  const auto& pt = pair_tables.for_keys(k);
  constexpr int kQuads = PairTables<B0, C0, B1, C1, B2, C2>::kQuads;
  __m512i gather[kQuads], control[kQuads], tables[3];
  for (int i = 0; i < kQuads; ++i) {
    gather[i] = _mm512_load_si512(pt.gather[i]);
    control[i] = _mm512_load_si512(pt.control[i]);
  }
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  HWY_ALIGN float qd[kAll * NQ][16];
  for (int g = 0, chunk = 0; g < kGroups; ++g) {
    const int b = kBits[g];
    // Entry i = level[i mod 2^B] (the bits above a code's own are the next code's).
    const __m512 level_row = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (1 << b)) - 1), k.levels[g]);
    tables[g] =
        _mm512_castps_si512(_mm512_permutexvar_ps(_mm512_and_si512(lane, _mm512_set1_epi32((1 << b) - 1)), level_row));
    for (int c = 0; c < kChunks[g]; ++c, ++chunk) {
      for (int r = 0; r < NQ; ++r) {
        _mm512_store_ps(qd[chunk * NQ + r],
                        _mm512_broadcast_f32x8(_mm256_loadu_ps(q + r * q_stride + k.offset[g] + 8 * c)));
      }
    }
  }
  __m512i scale_index[3];
  for (int g = 0; g < kGroups; ++g) {
    scale_index[g] = _mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(k.scale_stride))),
                                      _mm512_set1_epi32(g));
  }
  __m512 biases[NQ];
  for (int r = 0; r < NQ; ++r) biases[r] = _mm512_set1_ps(bias != nullptr ? bias[r] : 0.0f);
  const __m512i upper_half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i row_order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  const __mmask64 dword_low_bytes = 0x1111111111111111ULL;
  const int64_t n = k.n_rows;
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t rows = std::min<int64_t>(16, n - j0);
    const __m512i scale_bytes =
        _mm512_maskz_loadu_epi8(first_bytes((rows - 1) * k.scale_stride + kGroups), k.scales + j0 * k.scale_stride);
    __m512 block_scales[3];
    for (int g = 0; g < kGroups; ++g) {
      const __m512i codes = _mm512_maskz_permutexvar_epi8(dword_low_bytes, scale_index[g], scale_bytes);
      block_scales[g] = _mm512_i32gather_ps(codes, k.scale_table, 4);
    }
    __m512 sums[4][NQ];  // the tree's levels: pair 0 / level 1 / level 2 of rows 0-7 / level 2 of 8-15
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      const int64_t j = j0 + 2 * p;
      __m512 acc[NQ];
      if (j < n) {
        const __m512i codes = _mm512_maskz_loadu_epi8(
            first_bytes((std::min<int64_t>(2, n - j) - 1) * k.code_stride + row_bytes), k.codes + j * k.code_stride);
        const __m512i pair = _mm512_add_epi32(_mm512_set1_epi32(2 * p), upper_half);
        __m512 t[NQ];
        pair_group<C0, NQ>(codes, gather, control, tables[0], qd, 0, 0, t);
        const __m512 s0 = _mm512_permutexvar_ps(pair, block_scales[0]);
#pragma GCC unroll 4
        for (int r = 0; r < NQ; ++r) acc[r] = _mm512_mul_ps(t[r], s0);
        pair_group<C1, NQ>(codes, gather, control, tables[1], qd, (C0 + 3) / 4, C0, t);
        const __m512 s1 = _mm512_permutexvar_ps(pair, block_scales[1]);
#pragma GCC unroll 4
        for (int r = 0; r < NQ; ++r) acc[r] = _mm512_fmadd_ps(t[r], s1, acc[r]);
        if constexpr (C2 > 0) {
          pair_group<C2, NQ>(codes, gather, control, tables[2], qd, (C0 + 3) / 4 + (C1 + 3) / 4, C0 + C1, t);
          const __m512 s2 = _mm512_permutexvar_ps(pair, block_scales[2]);
#pragma GCC unroll 4
          for (int r = 0; r < NQ; ++r) acc[r] = _mm512_fmadd_ps(t[r], s2, acc[r]);
        }
      } else {
        for (int r = 0; r < NQ; ++r) acc[r] = _mm512_setzero_ps();
      }
#pragma GCC unroll 4
      for (int r = 0; r < NQ; ++r) {
        if (p % 2 == 0) {
          sums[0][r] = acc[r];
        } else if (p % 4 == 1) {
          sums[1][r] = pair_sums(sums[0][r], acc[r]);
        } else {
          sums[2 + p / 4][r] = pair_sums(sums[1][r], pair_sums(sums[0][r], acc[r]));
        }
      }
    }
    const __mmask16 valid = static_cast<__mmask16>((1u << rows) - 1);
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
      const __m512 a = sums[2][r], b = sums[3][r];
      const __m512 total = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
      _mm512_mask_storeu_ps(scores + r * ld + j0, valid,
                            _mm512_add_ps(_mm512_permutexvar_ps(row_order, total), biases[r]));
    }
  }
}

template <int NQ, int B0, int C0, int B1, int C1, int B2, int C2>
void score_layout_best(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, float* scores,
                       int64_t ld) {
  const int row_bytes = row_code_bytes(k);
  if (pairs_fit(k, row_bytes)) {
    return score_layout_pairs<NQ, B0, C0, B1, C1, B2, C2>(k, row_bytes, q, q_stride, bias, scores, ld);
  }
  score_layout<NQ, B0, C0, B1, C1, B2, C2>(k, q, q_stride, bias, scores, ld);
}
#else
template <int NQ, int B0, int C0, int B1, int C1, int B2, int C2>
void score_layout_best(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, float* scores,
                       int64_t ld) {
  score_layout<NQ, B0, C0, B1, C1, B2, C2>(k, q, q_stride, bias, scores, ld);
}
#endif

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
    score_layout_best<NQ, 4, 4, 3, 2, 2, 2>(k, q, q_stride, bias, scores, ld);
  } else if (is({{24, 4}, {40, 3}})) {
    score_layout_best<NQ, 4, 3, 3, 5, 1, 0>(k, q, q_stride, bias, scores, ld);
  } else if (is({{32, 4}, {32, 3}})) {
    score_layout_best<NQ, 4, 4, 3, 4, 1, 0>(k, q, q_stride, bias, scores, ld);
  } else if (is({{32, 4}, {32, 2}})) {
    score_layout_best<NQ, 4, 4, 2, 4, 1, 0>(k, q, q_stride, bias, scores, ld);
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
namespace {
// Channel group g of one row against query qr, in 8 lanes (lane l: codes 8c + l, c ascending;
// the first product plain, the rest fused).
void group_lanes(const SplitLevelKeys& k, const uint8_t* row, int g, const float* qr, float t[8]) {
  const int b = k.bits[g];
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
}
}  // namespace

void score_split_level_rows(const SplitLevelKeys& k, const float* q, int64_t q_stride, const float* bias, int64_t n_q,
                            float* scores, int64_t ld) {
  for (int64_t r = 0; r < n_q; ++r) {
    const float* qr = q + r * q_stride;
    for (int64_t j = 0; j < k.n_rows; ++j) {
      const uint8_t* row = k.codes + j * k.code_stride;
      float acc[8] = {};
      for (int g = 0; g < k.n_groups; ++g) {
        float t[8] = {};
        group_lanes(k, row, g, qr, t);
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
