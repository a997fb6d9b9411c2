// Highway kernels for block_level_key_scores.h, compiled once per target and dispatched at run
// time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/block_level_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/block_level_key_scores.h"
#include "veloxquant/attention/codebook_key_scores.h"
#include "veloxquant/attention/dense_code_lookup-inl.h"
#include "veloxquant/attention/dense_level_rows.h"
#include "veloxquant/attention/integer_query_step.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/half.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// x86 256-bit targets: the loop relies on the pairwise multiply-add's lane layout (lane l of
// vpmaddwd holds elements 2l and 2l + 1), which the scalar reference reproduces.
bool KeyScoresSupportedImpl() { return HWY_ARCH_X86 && hn::MaxLanes(hn::CappedTag<int32_t, 8>()) == 8; }

// One block's NQ exact i32 lane sums for score_units: `block_passes` passes of 16 codes from
// `pass` against the queries' 16-element runs from q (query r at q + r * dim), each sum started
// from zero or (kUniform) from its offsets (query r's at offsets + r * offset_stride).
template <int NQ, bool kUniform, class D32, class Lookup>
HWY_INLINE void block_lane_sums(D32 d32, const Lookup& level_of, const uint8_t* pass, const int16_t* q, int64_t dim,
                                int64_t block_passes, const int32_t* offsets, int64_t offset_stride,
                                hn::Vec<D32>* sum) {
  const hn::Repartition<int16_t, D32> d16;
  hn::Vec<D32> odd[NQ];
#pragma GCC unroll 3
  for (int r = 0; r < NQ; ++r) {
    odd[r] = hn::Zero(d32);
    if constexpr (kUniform) {
      sum[r] = hn::LoadU(d32, offsets + r * offset_stride);
    } else {
      sum[r] = hn::Zero(d32);
    }
  }
#pragma GCC unroll 16
  for (int64_t p = 0; p < block_passes; ++p, pass += Lookup::kPassBytes, q += 16) {
    const auto lv = hn::BitCast(d16, level_of(pass));
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
      sum[r] = hn::ReorderWidenMulAccumulate(d32, lv, hn::LoadU(d16, q + r * dim), sum[r], odd[r]);
    }
  }
#pragma GCC unroll 3
  for (int r = 0; r < NQ; ++r) sum[r] = hn::RearrangeToOddPlusEven(sum[r], odd[r]);  // x86: sum[r]
}

// U rows x NQ queries per unit (U * NQ <= 4: one row for a GQA group of three, four rows for a
// single query). Per row and query an f32 vector accumulates the blocks: each block's exact
// i32 lane sums are converted and multiplied into it with the block's scale (one FMA), so only
// NQ integer and NQ float vectors are alive besides the lookup tables. One sums_of_4 then
// reduces the unit's (up to) four vectors. kRowPasses / kBlockPasses: passes of 16 codes per
// row and per block known at compile time (0: read from the shape), so the common head sizes
// unroll whole.
//
// kUniform: codes on evenly spaced levels, value 2c - m (m = 2^B - 1). The codes are multiplied
// as they are by the doubled query (q16 here holds 2 q, uniform_queries), and each block's lane
// sums start from offsets[(r * blocks + b) * 8 + l] = -m * (the query elements lane l of block b
// sums): the same integers as with the table of 2c - m, without the lookup.
//
// kSymmetric: antisymmetric levels (levels.symmetric, 2 <= B <= 6) looked up from half a table
// (SymmetricCodeLookup): the same integers as the whole table, fewer instructions per pass.
template <int B, int NQ, int kRowPasses, int kBlockPasses, bool kUniform = false, bool kSymmetric = false>
void score_units(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16, const float* q_step,
                 const float* bias, float* scores, int64_t ld, const int32_t* offsets = nullptr) {
  constexpr int U = NQ == 1 ? 4 : 1;
  static_assert(U * NQ <= 4, "one reduction per unit");
  const hn::CappedTag<int32_t, 8> d32;
  const hn::Repartition<uint16_t, decltype(d32)> du16;
  const hn::Rebind<float, decltype(d32)> df;
  const hn::Half<decltype(df)> df4;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  using VF = hn::Vec<decltype(df)>;
  using Table =
      std::conditional_t<B == 8, EvenByteLevels<decltype(du16)>,
                         std::conditional_t<kSymmetric, SymmetricCodeLookup<std::clamp(B, 2, 6), decltype(du16)>,
                                            DenseCodeLookup<std::min(B, 6), decltype(du16)>>>;
  using Codes = std::conditional_t<B == 8, ByteCodes<decltype(du16)>, DenseCodes<std::min(B, 6), decltype(du16)>>;
  using Lookup = std::conditional_t<kUniform, Codes, Table>;
  constexpr int64_t kPassBytes = Lookup::kPassBytes;

  HWY_ALIGN uint16_t entries[256];
  for (int c = 0; c < (1 << B); ++c) entries[c] = static_cast<uint16_t>(levels.value[c]);
  const Lookup level_of = [&] {
    if constexpr (kUniform) {
      return Lookup();
    } else {
      return Lookup(entries);
    }
  }();

  const uint8_t* const codes = k.codes;
  const uint16_t* const scales = k.scales;
  const int64_t dim = k.dim, n_rows = k.n_rows, code_stride = k.code_stride;
  const int64_t row_passes = kRowPasses > 0 ? kRowPasses : dim / 16;
  const int64_t block_passes = kBlockPasses > 0 ? kBlockPasses : k.block / 16;
  const int64_t blocks = row_passes / block_passes;
  const int64_t row_code_bytes = (dim * B + 7) / 8;
  const int64_t row_load_end = (row_passes - 1) * kPassBytes + 16;  // the last pass reads 16 bytes
  // Rows whose last pass would read past the tile's code bytes (the last few) are read from a
  // zero-padded copy.
  const int64_t first_padded = first_padded_row(n_rows, code_stride, row_code_bytes, row_load_end);
  HWY_ALIGN uint8_t padded[U][kMaxCodeRowBytes + 16];

  // Lane t of a unit's result is row t / NQ, query t % NQ.
  HWY_ALIGN float step_lanes[4] = {0, 0, 0, 0}, bias_lanes[4] = {0, 0, 0, 0};
  for (int t = 0; t < U * NQ; ++t) {
    step_lanes[t] = q_step[t % NQ] * levels.step;
    bias_lanes[t] = bias != nullptr ? bias[t % NQ] : 0.0f;
  }
  const auto steps = hn::Load(df4, step_lanes), biases = hn::Load(df4, bias_lanes);

  for (int64_t j = 0; j < n_rows; j += U) {
    const int valid = static_cast<int>(std::min<int64_t>(U, n_rows - j));
    VF acc[4] = {hn::Zero(df), hn::Zero(df), hn::Zero(df), hn::Zero(df)};
#pragma GCC unroll 4
    for (int g = 0; g < U; ++g) {
      if (g >= valid) break;  // past the last row: its lanes stay zero and are not stored
      const uint8_t* pass = codes + (j + g) * code_stride;
      if (j + g >= first_padded) {
        std::memcpy(padded[g], pass, static_cast<std::size_t>(row_code_bytes));
        std::memset(padded[g] + row_code_bytes, 0, 16);
        pass = padded[g];
      }
      const uint16_t* row_scales = scales + (j + g) * blocks;
      const int16_t* q = q16;
#pragma GCC unroll 8
      for (int64_t b = 0; b < blocks; ++b, pass += block_passes * kPassBytes, q += 16 * block_passes) {
        hn::Vec<decltype(d32)> sum[NQ];
        block_lane_sums<NQ, kUniform>(d32, level_of, pass, q, dim, block_passes, kUniform ? offsets + b * 8 : nullptr,
                                      blocks * 8, sum);
        // The block's f16 scale broadcast to 8 f32 lanes: a u16 broadcast and the hardware
        // conversion.
        const auto scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(hn::Half<decltype(du16)>(), row_scales[b])));
#pragma GCC unroll 3
        for (int r = 0; r < NQ; ++r) acc[g * NQ + r] = hn::MulAdd(hn::ConvertTo(df, sum[r]), scale, acc[g * NQ + r]);
      }
    }
    const auto out = hn::Add(hn::Mul(sums_of_4(df, acc[0], acc[1], acc[2], acc[3]), steps), biases);
    if constexpr (NQ == 1) {
      if (valid == 4) {
        hn::StoreU(out, df4, scores + j);
        continue;
      }
    }
    HWY_ALIGN float lanes[4];
    hn::Store(out, df4, lanes);
    for (int t = 0; t < valid * NQ; ++t) scores[(t % NQ) * ld + j + t / NQ] = lanes[t];
  }
}

template <int B, int NQ, bool kSymmetric>
void score_table_shapes(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16, const float* q_step,
                        const float* bias, float* scores, int64_t ld) {
  // Head sizes 64 and 128 in blocks of 32 unrolled whole; other shapes loop.
  if (k.block == 32 && k.dim == 64) {
    return score_units<B, NQ, 4, 2, false, kSymmetric>(k, levels, q16, q_step, bias, scores, ld);
  }
  if (k.block == 32 && k.dim == 128) {
    return score_units<B, NQ, 8, 2, false, kSymmetric>(k, levels, q16, q_step, bias, scores, ld);
  }
  score_units<B, NQ, 0, 0, false, kSymmetric>(k, levels, q16, q_step, bias, scores, ld);
}

template <int B, int NQ>
void score_shapes(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16, const float* q_step,
                  const float* bias, float* scores, int64_t ld) {
  if constexpr (B >= 2 && B <= 6) {
    if (levels.symmetric) return score_table_shapes<B, NQ, true>(k, levels, q16, q_step, bias, scores, ld);
  }
  score_table_shapes<B, NQ, false>(k, levels, q16, q_step, bias, scores, ld);
}

template <int B, int NQ>
void score_uniform_shapes(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q2, const float* q_step,
                          const float* bias, float* scores, int64_t ld, const int32_t* offsets) {
  if (k.block == 32 && k.dim == 64) {
    return score_units<B, NQ, 4, 2, true>(k, levels, q2, q_step, bias, scores, ld, offsets);
  }
  if (k.block == 32 && k.dim == 128) {
    return score_units<B, NQ, 8, 2, true>(k, levels, q2, q_step, bias, scores, ld, offsets);
  }
  score_units<B, NQ, 0, 0, true>(k, levels, q2, q_step, bias, scores, ld, offsets);
}

// Codes on evenly spaced levels: the queries doubled (|q16| <= kUniformQueryLimit, so 2 q fits
// 16 bits) and each (query, block, lane)'s offset -m * sum of its query elements, then the rows
// scored from their codes as they are (score_units' kUniform). False (nothing scored) when a
// query element is beyond the limit: the caller takes the table path.
template <int B>
bool score_uniform_queries(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16,
                           const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const hn::CappedTag<int32_t, 8> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;
  const int64_t dim = k.dim, blocks = dim / k.block, passes = k.block / 16;
  constexpr int32_t m = (1 << B) - 1;
  thread_local std::vector<int16_t> q2;
  thread_local std::vector<int32_t> offsets;
  if (q2.size() < static_cast<std::size_t>(n_q * dim)) q2.resize(static_cast<std::size_t>(n_q * dim));
  if (offsets.size() < static_cast<std::size_t>(n_q * blocks * 8))
    offsets.resize(static_cast<std::size_t>(n_q * blocks * 8));
  // One pass over the queries: the largest magnitude, 2 q, and per block the lane sums
  // q[16p + 2l] + q[16p + 2l + 1] (a pairwise multiply-add with ones) times -m.
  const auto ones = hn::Set(d16, int16_t{1});
  auto largest = hn::Zero(d16);
  for (int64_t r = 0; r < n_q; ++r) {
    const int16_t* q = q16 + r * dim;
    for (int64_t b = 0; b < blocks; ++b) {
      auto lanes = hn::Zero(d32), odd = hn::Zero(d32);
      for (int64_t p = b * passes; p < (b + 1) * passes; ++p) {
        const auto v = hn::LoadU(d16, q + 16 * p);
        largest = hn::Max(largest, hn::Abs(v));
        hn::StoreU(hn::Add(v, v), d16, q2.data() + r * dim + 16 * p);
        lanes = hn::ReorderWidenMulAccumulate(d32, v, ones, lanes, odd);
      }
      lanes = hn::RearrangeToOddPlusEven(lanes, odd);  // x86: lanes
      hn::StoreU(hn::Mul(lanes, hn::Set(d32, -m)), d32, offsets.data() + (r * blocks + b) * 8);
    }
  }
  // Abs(-32768) stays negative as int16: counted as too large through the unsigned view.
  const hn::RebindToUnsigned<decltype(d16)> du16;
  if (hn::GetLane(hn::MaxOfLanes(du16, hn::BitCast(du16, largest))) > static_cast<uint16_t>(kUniformQueryLimit)) {
    return false;
  }
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    score_uniform_shapes<B, 3>(k, levels, q2.data() + r * dim, q_step + r, bias != nullptr ? bias + r : nullptr,
                               scores + r * ld, ld, offsets.data() + r * blocks * 8);
  }
  for (; r < n_q; ++r) {
    score_uniform_shapes<B, 1>(k, levels, q2.data() + r * dim, q_step + r, bias != nullptr ? bias + r : nullptr,
                               scores + r * ld, ld, offsets.data() + r * blocks * 8);
  }
  return true;
}

template <int B>
void score_level_queries(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16, const float* q_step,
                         const float* bias, int64_t n_q, float* scores, int64_t ld) {
  // Three queries per pass over the rows (a GQA group of SmolLM2 and Llama-3), then one by one.
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    score_shapes<B, 3>(k, levels, q16 + r * k.dim, q_step + r, bias != nullptr ? bias + r : nullptr, scores + r * ld,
                       ld);
  }
  for (; r < n_q; ++r) {
    score_shapes<B, 1>(k, levels, q16 + r * k.dim, q_step + r, bias != nullptr ? bias + r : nullptr, scores + r * ld,
                       ld);
  }
}

// Lane t of the result: ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)) of vector t (x86: three
// horizontal adds and one add of the halves, against nine shuffles and adds for sums_of_4).
template <class DF, class V>
HWY_INLINE hn::Vec<hn::Half<DF>> pair_sums_of_4(DF df, V a, V b, V c, V e) {
  const hn::Half<DF> dh;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const V ab{_mm256_hadd_ps(a.raw, b.raw)}, ce{_mm256_hadd_ps(c.raw, e.raw)};
  const V s{_mm256_hadd_ps(ab.raw, ce.raw)};
  return hn::Add(hn::LowerHalf(dh, s), hn::UpperHalf(dh, s));
#else
  HWY_ALIGN float lanes[4][8];
  hn::Store(a, df, lanes[0]);
  hn::Store(b, df, lanes[1]);
  hn::Store(c, df, lanes[2]);
  hn::Store(e, df, lanes[3]);
  HWY_ALIGN float out[4];
  for (int t = 0; t < 4; ++t) {
    const float* v = lanes[t];
    out[t] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  }
  return hn::Load(dh, out);
#endif
}

// Block b's NQ f32 dot products for score_permuted_units: its `groups` groups of 8 codes of the
// row (B bits each, from `row`) looked up in `table` and multiplied into the queries' elements
// (query r at q + r * q_stride), one FMA chain per query in element order.
template <int B, int NQ, class DF>
HWY_INLINE void permuted_block_dots(DF df, hn::Vec<DF> table, hn::Vec<hn::RebindToUnsigned<DF>> shifts,
                                    const uint8_t* row, int64_t b, int64_t groups, const float* q, int64_t q_stride,
                                    hn::Vec<DF>* t) {
  const hn::RebindToUnsigned<DF> du32;
#pragma GCC unroll 8
  for (int64_t gg = 0; gg < groups; ++gg) {
    const int64_t e = 8 * (b * groups + gg);
    uint32_t word;
    std::memcpy(&word, row + e / 8 * B, sizeof(word));
    const auto level = permute_lanes8(df, table, hn::Shr(hn::Set(du32, word), shifts));
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
      const auto qv = hn::LoadU(df, q + r * q_stride + e);
      t[r] = gg == 0 ? hn::Mul(level, qv) : hn::MulAdd(level, qv, t[r]);
    }
  }
}

// score_permuted_level_rows (header), U rows x NQ queries per unit (U * NQ <= 4: one sums_of_4
// per unit). Table entry i = level[i mod 2^B], so the bits of the next codes above a code's own
// pick the same level and need no mask.
// kBlocks / kGroups: blocks per row and groups of 8 codes per block known at compile time (0: read
// from the shape), so the common head sizes unroll whole and the partial sums stay in registers.
template <int B, int NQ, int kBlocks, int kGroups>
void score_permuted_units(const BlockLevelKeys& k, const float* levels, const float* q, int64_t q_stride,
                          const float* bias, float* scores, int64_t ld) {
  static_assert(B >= 1 && B <= 3, "8 levels per register");
  constexpr int U = NQ == 1 ? 4 : 1;
  static_assert(U * NQ <= 4, "one reduction per unit");
  const hn::CappedTag<float, 8> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::Half<decltype(df)> df4;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  using VF = hn::Vec<decltype(df)>;
  HWY_ALIGN float entries[8];
  HWY_ALIGN uint32_t shift[8];
  for (int i = 0; i < 8; ++i) {
    entries[i] = levels[i & ((1 << B) - 1)];
    shift[i] = static_cast<uint32_t>(B * i);
  }
  const VF table = hn::Load(df, entries);
  const auto shifts = hn::Load(du32, shift);
  const int64_t dim = k.dim, n_rows = k.n_rows, code_stride = k.code_stride;
  const int64_t blocks = kBlocks > 0 ? kBlocks : dim / k.block, groups = kGroups > 0 ? kGroups : k.block / 8;
  const int64_t row_code_bytes = dim * B / 8;
  const int64_t row_load_end = (dim / 8 - 1) * B + 4;  // the last group of 8 codes reads 4 bytes
  const int64_t first_padded = first_padded_row(n_rows, code_stride, row_code_bytes, row_load_end);
  HWY_ALIGN uint8_t padded[U][kMaxCodeRowBytes + 16];
  HWY_ALIGN float bias_lanes[4] = {0, 0, 0, 0};
  for (int t = 0; t < U * NQ; ++t) bias_lanes[t] = bias != nullptr ? bias[t % NQ] : 0.0f;
  const auto biases = hn::Load(df4, bias_lanes);
  // Known shapes: the queries copied side by side, so every query vector the loop reads lies at a
  // constant offset from one register (with q_stride apart, GCC kept 24 pointers on the stack).
  constexpr int64_t kDim = static_cast<int64_t>(kBlocks) * kGroups * 8;
  HWY_ALIGN float local[kDim > 0 ? NQ * kDim : 1];
  if constexpr (kDim > 0) {
    for (int r = 0; r < NQ; ++r) std::memcpy(local + r * kDim, q + r * q_stride, sizeof(float) * kDim);
    q = local;
    q_stride = kDim;
  }

  for (int64_t j = 0; j < n_rows; j += U) {
    const int valid = static_cast<int>(std::min<int64_t>(U, n_rows - j));
    VF acc[4] = {hn::Zero(df), hn::Zero(df), hn::Zero(df), hn::Zero(df)};
#pragma GCC unroll 4
    for (int g = 0; g < U; ++g) {
      if (g >= valid) break;  // past the last row: its lanes stay zero and are not stored
      const uint8_t* row = k.codes + (j + g) * code_stride;
      if (j + g >= first_padded) {
        std::memcpy(padded[g], row, static_cast<std::size_t>(row_code_bytes));
        std::memset(padded[g] + row_code_bytes, 0, 16);
        row = padded[g];
      }
      const uint16_t* row_scales = k.scales + (j + g) * blocks;
#pragma GCC unroll 8
      for (int64_t b = 0; b < blocks; ++b) {
        VF t[NQ];
        permuted_block_dots<B, NQ>(df, table, shifts, row, b, groups, q, q_stride, t);
        const VF scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16, row_scales[b])));
#pragma GCC unroll 3
        for (int r = 0; r < NQ; ++r) {
          acc[g * NQ + r] = b == 0 ? hn::Mul(t[r], scale) : hn::MulAdd(t[r], scale, acc[g * NQ + r]);
        }
      }
    }
    const auto out = hn::Add(pair_sums_of_4(df, acc[0], acc[1], acc[2], acc[3]), biases);
    if constexpr (NQ == 1) {
      if (valid == 4) {
        hn::StoreU(out, df4, scores + j);
        continue;
      }
    }
    HWY_ALIGN float lanes[4];
    hn::Store(out, df4, lanes);
    for (int t = 0; t < valid * NQ; ++t) scores[(t % NQ) * ld + j + t / NQ] = lanes[t];
  }
}

template <int B, int NQ>
void score_permuted_shapes(const BlockLevelKeys& k, const float* levels, const float* q, int64_t q_stride,
                           const float* bias, float* scores, int64_t ld) {
  // Head sizes 64 and 128 in blocks of 32 unrolled whole; other shapes loop.
  if (k.block == 32 && k.dim == 64) return score_permuted_units<B, NQ, 2, 4>(k, levels, q, q_stride, bias, scores, ld);
  if (k.block == 32 && k.dim == 128) return score_permuted_units<B, NQ, 4, 4>(k, levels, q, q_stride, bias, scores, ld);
  score_permuted_units<B, NQ, 0, 0>(k, levels, q, q_stride, bias, scores, ld);
}

template <int B>
void score_permuted_queries(const BlockLevelKeys& k, const float* levels, const float* q, int64_t q_stride,
                            const float* bias, int64_t n_q, float* scores, int64_t ld) {
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    score_permuted_shapes<B, 3>(k, levels, q + r * q_stride, q_stride, bias != nullptr ? bias + r : nullptr,
                                scores + r * ld, ld);
  }
  for (; r < n_q; ++r) {
    score_permuted_shapes<B, 1>(k, levels, q + r * q_stride, q_stride, bias != nullptr ? bias + r : nullptr,
                                scores + r * ld, ld);
  }
}

void ScorePermutedLevelsImpl(const BlockLevelKeys& k, const float* levels, const float* q, int64_t q_stride,
                             const float* bias, int64_t n_q, float* scores, int64_t ld) {
  if (k.n_rows <= 0 || n_q <= 0) return;
  if constexpr (hn::MaxLanes(hn::CappedTag<float, 8>()) == 8) {
    switch (k.bits) {
      case 1:
        return score_permuted_queries<1>(k, levels, q, q_stride, bias, n_q, scores, ld);
      case 2:
        return score_permuted_queries<2>(k, levels, q, q_stride, bias, n_q, scores, ld);
      case 3:
        return score_permuted_queries<3>(k, levels, q, q_stride, bias, n_q, scores, ld);
      default:
        break;
    }
  }
  scalar::score_permuted_level_rows(k, levels, q, q_stride, bias, n_q, scores, ld);
}

void ScoreBlockLevelsImpl(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16, const float* q_step,
                          const float* bias, int64_t n_q, float* scores, int64_t ld) {
  if (k.n_rows <= 0 || n_q <= 0) return;
  // Other targets (KeyScoresSupportedImpl false: callers decode instead) keep the scalar loop.
  if constexpr (HWY_ARCH_X86 && hn::MaxLanes(hn::CappedTag<int32_t, 8>()) == 8) {
    if (levels.even && k.dim % 16 == 0 && k.block % 16 == 0) {
      bool done = false;
      switch (k.bits) {
        case 1:
          done = score_uniform_queries<1>(k, levels, q16, q_step, bias, n_q, scores, ld);
          break;
        case 2:
          done = score_uniform_queries<2>(k, levels, q16, q_step, bias, n_q, scores, ld);
          break;
        case 3:
          done = score_uniform_queries<3>(k, levels, q16, q_step, bias, n_q, scores, ld);
          break;
        case 4:
          done = score_uniform_queries<4>(k, levels, q16, q_step, bias, n_q, scores, ld);
          break;
        case 5:
          done = score_uniform_queries<5>(k, levels, q16, q_step, bias, n_q, scores, ld);
          break;
        case 6:
          done = score_uniform_queries<6>(k, levels, q16, q_step, bias, n_q, scores, ld);
          break;
        // 8 bits keep EvenByteLevels: measured no cheaper per row (the setup per tile ate the
        // two instructions saved per 16 codes).
        default:
          break;
      }
      if (done) return;
    }
    switch (k.bits) {
      case 1:
        return score_level_queries<1>(k, levels, q16, q_step, bias, n_q, scores, ld);
      case 2:
        return score_level_queries<2>(k, levels, q16, q_step, bias, n_q, scores, ld);
      case 3:
        return score_level_queries<3>(k, levels, q16, q_step, bias, n_q, scores, ld);
      case 4:
        return score_level_queries<4>(k, levels, q16, q_step, bias, n_q, scores, ld);
      case 5:
        return score_level_queries<5>(k, levels, q16, q_step, bias, n_q, scores, ld);
      case 6:
        return score_level_queries<6>(k, levels, q16, q_step, bias, n_q, scores, ld);
      case 8:
        if (levels.even) return score_level_queries<8>(k, levels, q16, q_step, bias, n_q, scores, ld);
        break;
      default:
        break;
    }
  }
  scalar::score_block_level_rows(k, levels, q16, q_step, bias, n_q, scores, ld);
}
#else
bool KeyScoresSupportedImpl() { return false; }
void ScorePermutedLevelsImpl(const BlockLevelKeys& k, const float* levels, const float* q, int64_t q_stride,
                             const float* bias, int64_t n_q, float* scores, int64_t ld) {
  scalar::score_permuted_level_rows(k, levels, q, q_stride, bias, n_q, scores, ld);
}
void ScoreBlockLevelsImpl(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16, const float* q_step,
                          const float* bias, int64_t n_q, float* scores, int64_t ld) {
  scalar::score_block_level_rows(k, levels, q16, q_step, bias, n_q, scores, ld);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(KeyScoresSupportedImpl);
HWY_EXPORT(ScoreBlockLevelsImpl);
HWY_EXPORT(ScorePermutedLevelsImpl);

bool can_score_permuted_level_rows(int bits, int64_t dim, int64_t block) {
  static const bool supported = HWY_DYNAMIC_DISPATCH(KeyScoresSupportedImpl)();
  return supported && bits >= 1 && bits <= 3 && block > 0 && block % 8 == 0 && dim > 0 && dim % block == 0 &&
         (dim * bits + 7) / 8 <= kMaxCodeRowBytes;
}

void score_permuted_level_rows(const BlockLevelKeys& keys, const float* levels, const float* q, int64_t q_stride,
                               const float* bias, int64_t n_q, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScorePermutedLevelsImpl)(keys, levels, q, q_stride, bias, n_q, scores, ld);
}

int32_t block_integer_limit(int64_t block) {
  // A lane of the loop sums block / 8 products (two per multiply-add, block / 16 passes): the
  // codebook scorer's bound for sums of that many products.
  return codebook_integer_limit(std::max<int64_t>(1, block / 8));
}

BlockLevels16 block_levels16(const float* levels, int bits, int32_t limit) {
  const int n = 1 << bits;
  BlockLevels16 out{};
  out.even = true;
  for (int c = 0; c < n; ++c) {
    out.even = out.even && levels[c] * static_cast<float>(n) == static_cast<float>(2 * c - (n - 1));
  }
  if (out.even) {  // exact small integers; |value| < 2^bits leaves the query its whole limit
    out.step = 1.0f / static_cast<float>(n);
    for (int c = 0; c < n; ++c) out.value[c] = static_cast<int16_t>(2 * c - (n - 1));
    return out;
  }
  float max_abs = 0.0f;
  for (int c = 0; c < n; ++c) max_abs = std::max(max_abs, std::fabs(levels[c]));
  const QueryStep s = query_step(max_abs, limit);
  out.step = s.step;
  for (int c = 0; c < n; ++c) out.value[c] = static_cast<int16_t>(std::lrintf(levels[c] * s.inverse));
  out.symmetric = bits >= 2;
  for (int c = 0; c < n; ++c) out.symmetric = out.symmetric && out.value[n - 1 - c] == -out.value[c];
  return out;
}

bool can_score_block_level_rows(int bits, int64_t dim, int64_t block) {
  static const bool supported = HWY_DYNAMIC_DISPATCH(KeyScoresSupportedImpl)();
  return supported && ((bits >= 1 && bits <= 6) || bits == 8) && block > 0 && block % 16 == 0 && dim > 0 &&
         dim % block == 0 && (dim * bits + 7) / 8 <= kMaxCodeRowBytes;
}

void quantize_query_i16(const float* q, int64_t d, int32_t limit, int16_t* q16, float* step) {
  const QueryStep s = vector_step(q, d, limit);
  *step = s.step;
  // A NaN step makes every score NaN; the values are then never read as numbers.
  const bool finite = !std::isnan(s.step);
  for (int64_t e = 0; e < d; ++e) q16[e] = finite ? static_cast<int16_t>(std::lrintf(q[e] * s.inverse)) : int16_t{0};
}

void score_block_level_rows(const BlockLevelKeys& keys, const BlockLevels16& levels, const int16_t* q16,
                            const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreBlockLevelsImpl)(keys, levels, q16, q_step, bias, n_q, scores, ld);
}

namespace scalar {
namespace {
// Block b of one row against query qr, in 8 lanes (lane l: elements 8g + l of the block's groups
// g ascending; the first product plain, the rest fused).
void permuted_block_lanes(const BlockLevelKeys& k, const uint8_t* packed, int64_t b, const float* levels,
                          const float* qr, float t[8]) {
  const int64_t groups = k.block / 8;
  for (int64_t g = 0; g < groups; ++g) {
    for (int lane = 0; lane < 8; ++lane) {
      const int64_t e = 8 * (b * groups + g) + lane;
      const int code = dense_code(packed, e, k.bits);
      t[lane] = g == 0 ? levels[code] * qr[e] : std::fma(levels[code], qr[e], t[lane]);
    }
  }
}

// The integer sum of SIMD lane `lane` over block b (elements 16p + 2 lane and 16p + 2 lane + 1
// of every pass p of the block) against integer query q.
int32_t block_lane_total(const BlockLevelKeys& k, const uint8_t* packed, int64_t b, int lane,
                         const BlockLevels16& levels, const int16_t* q) {
  int32_t total = 0;
  for (int64_t p = b * k.block / 16; p < (b + 1) * k.block / 16; ++p) {
    for (int64_t e = 16 * p + 2 * int64_t{lane}; e < 16 * p + 2 * int64_t{lane} + 2; ++e) {
      total += static_cast<int32_t>(q[e]) * levels.value[dense_code(packed, e, k.bits)];
    }
  }
  return total;
}
}  // namespace

void score_permuted_level_rows(const BlockLevelKeys& k, const float* levels, const float* q, int64_t q_stride,
                               const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const int64_t nb = k.dim / k.block;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < k.n_rows; ++j) {
      const uint8_t* packed = k.codes + j * k.code_stride;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t b = 0; b < nb; ++b) {
        float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        permuted_block_lanes(k, packed, b, levels, q + r * q_stride, t);
        const float scale = base::f16_to_f32(k.scales[j * nb + b]);
        for (int lane = 0; lane < 8; ++lane) acc[lane] = b == 0 ? t[lane] * scale : std::fma(t[lane], scale, acc[lane]);
      }
      const float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      scores[r * ld + j] = sum + (bias != nullptr ? bias[r] : 0.0f);
    }
  }
}

void score_block_level_rows(const BlockLevelKeys& k, const BlockLevels16& levels, const int16_t* q16,
                            const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const int64_t nb = k.dim / k.block;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < k.n_rows; ++j) {
      const uint8_t* packed = k.codes + j * k.code_stride;
      // Lane l of the SIMD loop holds elements 16p + 2l and 16p + 2l + 1 of every pass p.
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t b = 0; b < nb; ++b) {
        const float scale = base::f16_to_f32(k.scales[j * nb + b]);
        for (int lane = 0; lane < 8; ++lane) {
          const int32_t total = block_lane_total(k, packed, b, lane, levels, q16 + r * k.dim);
          acc[lane] = std::fma(static_cast<float>(total), scale, acc[lane]);
        }
      }
      // The lanes added as sums_of_4 adds them: (0 + 2) + (1 + 3) within each half, then halves.
      const float sum = ((acc[0] + acc[2]) + (acc[1] + acc[3])) + ((acc[4] + acc[6]) + (acc[5] + acc[7]));
      const float b = bias != nullptr ? bias[r] : 0.0f;
      scores[r * ld + j] = (q_step[r] * levels.step) * sum + b;
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
